package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"golang.org/x/crypto/ssh"
)

// ciphers: AEAD only, AES-GCM first (what sshlink.py offers).
var ciphers = []string{"aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com"}

func serviceName(domain string) string { return "rlark-tunnel." + domain }

// directTCPIP is the payload of a direct-tcpip channel open (RFC 4254 7.2).
type directTCPIP struct {
	Host     string
	Port     uint32
	OrigHost string
	OrigPort uint32
}

func (d *Dataplane) serverConfig() *ssh.ServerConfig {
	cfg := &ssh.ServerConfig{
		// Only public-key auth is offered (no password, keyboard-interactive or host-based
		// callbacks): the key must be exactly the one issued to the cluster named as the user.
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			want := d.peerKey(meta.User())
			if want == nil || !bytes.Equal(want.Marshal(), key.Marshal()) {
				return nil, fmt.Errorf("key not issued to %q for this domain", meta.User())
			}
			return nil, nil
		},
		ServerVersion: "SSH-2.0-rlark-tunnel-dp",
	}
	cfg.Ciphers = ciphers
	cfg.AddHostKey(d.signer)
	return cfg
}

// serve accepts peers' connections until the listener closes: SSH connections, and the keyed data
// connections that follow them (told apart by their first bytes).
func (d *Dataplane) serve(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go d.accept(conn)
	}
}

// prefixed is a connection whose first bytes were already read.
type prefixed struct {
	net.Conn
	r io.Reader
}

func (p *prefixed) Read(b []byte) (int, error) { return p.r.Read(b) }

func (d *Dataplane) accept(conn net.Conn) {
	conn.SetDeadline(time.Now().Add(d.cfg.connectTimeout() * 3))
	head := make([]byte, len(dataMagic))
	if _, err := io.ReadFull(conn, head); err != nil {
		conn.Close()
		return
	}
	if string(head) != dataMagic {
		d.handshake(&prefixed{conn, io.MultiReader(bytes.NewReader(head), conn)}, conn)
		return
	}
	var id [dataIDSize]byte
	if _, err := io.ReadFull(conn, id[:]); err != nil {
		conn.Close()
		return
	}
	d.mu.Lock()
	p, ok := d.pending[id]
	delete(d.pending, id)
	d.mu.Unlock()
	if !ok { // unknown or expired: nothing to say to it
		conn.Close()
		return
	}
	p.timer.Stop()
	conn.SetDeadline(time.Time{})
	p.link.attach(p.conn, p.ch, newSealedConn(conn, p.keys, false))
}

// pendingData is a peer's authenticated SSH session waiting for its keyed data connection.
type pendingData struct {
	link  *peerLink
	conn  ssh.Conn
	ch    ssh.Channel
	keys  *dataKeys
	timer *time.Timer
}

// exchangeRandoms sends ours and reads the peer's 32 bytes on the (SSH-encrypted) frame channel.
func exchangeRandoms(ch ssh.Channel, dialer bool) (dialRandom, serverRandom []byte, err error) {
	ours, theirs := make([]byte, randomSize), make([]byte, randomSize)
	if _, err = rand.Read(ours); err != nil {
		return nil, nil, err
	}
	if _, err = ch.Write(ours); err != nil {
		return nil, nil, err
	}
	if _, err = io.ReadFull(ch, theirs); err != nil {
		return nil, nil, err
	}
	if dialer {
		return ours, theirs, nil
	}
	return theirs, ours, nil
}

func (d *Dataplane) handshake(conn net.Conn, raw net.Conn) {
	sc, chans, reqs, err := ssh.NewServerConn(conn, d.serverConfig())
	if err != nil {
		conn.Close()
		return
	}
	conn.SetDeadline(time.Time{})
	go ssh.DiscardRequests(reqs) // no global requests: remote forwarding and the rest refused
	link := d.link(sc.User())
	for nc := range chans {
		var dest directTCPIP
		if nc.ChannelType() != "direct-tcpip" || ssh.Unmarshal(nc.ExtraData(), &dest) != nil ||
			dest.Host != serviceName(d.cfg.Domain) || link == nil {
			nc.Reject(ssh.Prohibited, "only the domain's frame service")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go ssh.DiscardRequests(creqs)
		if !d.cfg.keyed() {
			link.attach(sc, ch, nil)
			continue
		}
		raw.SetDeadline(time.Now().Add(d.cfg.connectTimeout()))
		dialR, srvR, err := exchangeRandoms(ch, false)
		raw.SetDeadline(time.Time{})
		if err != nil {
			sc.Close()
			return
		}
		keys, err := deriveKeys(sc.SessionID(), dialR, srvR, d.cfg.Domain, sc.User(), d.cfg.Cluster)
		if err != nil {
			sc.Close()
			return
		}
		p := &pendingData{link: link, conn: sc, ch: ch, keys: keys}
		d.mu.Lock()
		d.pending[keys.id] = p
		p.timer = time.AfterFunc(d.cfg.connectTimeout(), func() {
			d.mu.Lock()
			expired := d.pending[keys.id] == p
			delete(d.pending, keys.id)
			d.mu.Unlock()
			if expired {
				sc.Close()
			}
		})
		d.mu.Unlock()
	}
}

// dial keeps one connection to a peer this side dials, reconnecting with capped exponential
// backoff until stop is closed.
func (d *Dataplane) dial(link *peerLink, host string, port int, hostKey ssh.PublicKey, stop chan struct{}) {
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-stop:
			return
		default:
		}
		link.setConnecting()
		if s, err := d.connectOnce(link, host, port, hostKey); err != nil {
			link.fail(err.Error())
		} else {
			backoff = 100 * time.Millisecond
			select {
			case <-s.done:
			case <-stop:
				s.close("peer removed")
				return
			}
		}
		select {
		case <-stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, d.cfg.backoffMax())
	}
}

func (d *Dataplane) connectOnce(link *peerLink, host string, port int, hostKey ssh.PublicKey) (*session, error) {
	timeout := d.cfg.connectTimeout()
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", addr, err)
	}
	conn.SetDeadline(time.Now().Add(timeout))
	cfg := &ssh.ClientConfig{
		User:              d.cfg.Cluster,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(d.signer)},
		HostKeyCallback:   ssh.FixedHostKey(hostKey), // pinned: the key issued to that cluster
		HostKeyAlgorithms: []string{hostKey.Type()},
		Timeout:           timeout,
	}
	cfg.Ciphers = ciphers
	cc, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("ssh %s: %w", addr, err)
	}
	go ssh.DiscardRequests(reqs)
	go func() {
		for nc := range chans { // nothing may be opened towards the dialing side
			nc.Reject(ssh.Prohibited, "no channels")
		}
	}()
	ch, creqs, err := cc.OpenChannel("direct-tcpip", ssh.Marshal(&directTCPIP{Host: serviceName(d.cfg.Domain)}))
	if err != nil {
		cc.Close()
		return nil, fmt.Errorf("frame channel to %s: %w", addr, err)
	}
	go ssh.DiscardRequests(creqs)
	if !d.cfg.keyed() {
		conn.SetDeadline(time.Time{})
		return link.attach(cc, ch, nil), nil
	}
	dialR, srvR, err := exchangeRandoms(ch, true)
	if err != nil {
		cc.Close()
		return nil, fmt.Errorf("key exchange with %s: %w", addr, err)
	}
	keys, err := deriveKeys(cc.SessionID(), dialR, srvR, d.cfg.Domain, d.cfg.Cluster, link.cluster)
	if err != nil {
		cc.Close()
		return nil, err
	}
	data, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		cc.Close()
		return nil, fmt.Errorf("data connection to %s: %w", addr, err)
	}
	if _, err = data.Write(append([]byte(dataMagic), keys.id[:]...)); err != nil {
		data.Close()
		cc.Close()
		return nil, fmt.Errorf("data connection to %s: %w", addr, err)
	}
	conn.SetDeadline(time.Time{})
	return link.attach(cc, ch, newSealedConn(data, keys, true)), nil
}
