package main

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// The keyed data stream (ADR 0008): the peer link's SSH connection authenticates both agents
// (pinned Ed25519 keys) and carries, on its frame channel, one fresh 32-byte random from each
// side; keys for a second TCP connection between the same two agents are derived from both
// randoms and the SSH session id. On that connection every write is one record:
//
//	uint32 length (big-endian, authenticated as additional data) || AES-128-GCM(plaintext) || tag
//
// with a 96-bit nonce of a per-direction 4-byte salt and a 64-bit record counter, so a record
// that is replayed, reordered, cut or forged fails its tag and the session is closed. Keys live
// only in this process's memory and only for one session (a reconnect derives new ones).

const (
	dataMagic     = "RLARKDP1" // first bytes of a data connection (an SSH connection starts "SSH-")
	dataIDSize    = 16
	randomSize    = 32
	tagSize       = 16
	maxRecord     = 1 << 20
	maxRecords    = 1 << 32 // then the session ends and a reconnect derives fresh keys
	keyLabel      = "rlark-tunnel data v1"
	directionDial = "dialer->server"
	directionSrv  = "server->dialer"
)

// dataKeys are one session's secrets: a key and nonce salt per direction, and the id the dialer
// presents on the data connection (derived too, so it reveals nothing and cannot be guessed).
type dataKeys struct {
	id                 [dataIDSize]byte
	dialKey, serverKey []byte
	dialSalt, srvSalt  []byte
}

func deriveKeys(sessionID, dialRandom, serverRandom []byte, domain, dialer, server string) (*dataKeys, error) {
	secret := append(append([]byte{}, dialRandom...), serverRandom...)
	info := fmt.Sprintf("%s|%s|%s|%s", keyLabel, domain, dialer, server)
	material, err := hkdf.Key(sha256.New, secret, sessionID, info, dataIDSize+2*16+2*4)
	if err != nil {
		return nil, err
	}
	k := &dataKeys{dialKey: material[16:32], serverKey: material[32:48], dialSalt: material[48:52], srvSalt: material[52:56]}
	copy(k.id[:], material[:16])
	return k, nil
}

// sealedConn is the keyed data stream over conn: Write seals its whole argument as one record,
// Read returns the plaintext of the records received, in order.
type sealedConn struct {
	conn net.Conn
	io   io.ReadWriter // conn, or its raw system calls when it is TCP (rawio.go)

	copyMu   sync.Mutex // Write's copy buffer (record)
	wmu      sync.Mutex // sealing and writing one record
	seal     cipher.AEAD
	sealSalt []byte
	sealSeq  uint64
	sealNon  [12]byte
	record   []byte

	open     cipher.AEAD
	openSalt []byte
	openSeq  uint64
	openNon  [12]byte
	rbuf     []byte
	rstart   int
	rfill    int
	plain    []byte
	lowat    lowWater
}

func newAEAD(key []byte) cipher.AEAD {
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err) // 16-byte keys only: cannot fail
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return aead
}

func newSealedConn(conn net.Conn, keys *dataKeys, dialer bool) *sealedConn {
	sendKey, sendSalt, recvKey, recvSalt := keys.dialKey, keys.dialSalt, keys.serverKey, keys.srvSalt
	if !dialer {
		sendKey, sendSalt, recvKey, recvSalt = recvKey, recvSalt, sendKey, sendSalt
	}
	var rw io.ReadWriter = conn
	if tcp, ok := conn.(*net.TCPConn); ok {
		if rc, err := tcp.SyscallConn(); err == nil {
			rw = rawStream{rc}
		}
	}
	return &sealedConn{
		conn: conn, io: rw, seal: newAEAD(sendKey), sealSalt: sendSalt, open: newAEAD(recvKey), openSalt: recvSalt,
		record: make([]byte, 0, recordHead+maxRecord+tagSize), rbuf: make([]byte, 2*(maxRecord+4+tagSize)),
		lowat: newLowWater(conn),
	}
}

// nonce fills n (12 bytes) with salt and the record counter.
func nonce(n *[12]byte, salt []byte, seq uint64) []byte {
	copy(n[:4], salt)
	binary.BigEndian.PutUint64(n[4:], seq)
	return n[:]
}

var errRecordLimit = errors.New("record limit of this session's keys reached")

// recordHead is the room in front of a record's plaintext for its length: a buffer laid out as
// recordHead bytes, the plaintext, then tagSize bytes of spare capacity is sealed where it lies.
const recordHead = 4

// writeRecord seals rec[recordHead:] in place as one record and writes it. rec has recordHead
// bytes of room in front of the plaintext (the length goes there) and at least tagSize bytes of
// spare capacity behind it (the tag goes there); its contents are ciphertext afterwards.
func (c *sealedConn) writeRecord(rec []byte) error {
	plain := rec[recordHead:]
	if len(plain) > maxRecord || cap(rec)-len(rec) < tagSize {
		return fmt.Errorf("data stream: %d bytes with room for %d do not make a record", len(plain), cap(rec)-len(rec))
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.sealSeq >= maxRecords {
		return errRecordLimit
	}
	binary.BigEndian.PutUint32(rec, uint32(len(plain)+tagSize))
	sealed := c.seal.Seal(plain[:0], nonce(&c.sealNon, c.sealSalt, c.sealSeq), plain, rec[:recordHead])
	c.sealSeq++
	_, err := c.io.Write(rec[:recordHead+len(sealed)])
	return err
}

// Write seals p as records of at most maxRecord bytes (copied first: p is left as it is).
func (c *sealedConn) Write(p []byte) (int, error) {
	c.copyMu.Lock()
	defer c.copyMu.Unlock()
	written := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), maxRecord)]
		if err := c.writeRecord(append(c.record[:recordHead], chunk...)); err != nil {
			return written, err
		}
		written += len(chunk)
		p = p[len(chunk):]
	}
	return written, nil
}

func (c *sealedConn) Read(p []byte) (int, error) {
	for len(c.plain) == 0 {
		plain, err := c.nextRecord()
		if err != nil {
			return 0, err
		}
		c.plain = plain
	}
	n := copy(p, c.plain)
	c.plain = c.plain[n:]
	return n, nil
}

// nextRecord reads and opens one record in place and returns its plaintext, valid until the next
// call (the session's reader cuts frames out of it without copying them).
func (c *sealedConn) nextRecord() ([]byte, error) {
	for {
		if avail := c.rfill - c.rstart; avail >= 4 {
			length := int(binary.BigEndian.Uint32(c.rbuf[c.rstart:]))
			if length < tagSize || length > maxRecord+tagSize {
				return nil, fmt.Errorf("data stream: record of %d bytes", length)
			}
			if avail >= 4+length {
				hdr := c.rbuf[c.rstart : c.rstart+4]
				body := c.rbuf[c.rstart+4 : c.rstart+4+length]
				if c.openSeq >= maxRecords {
					return nil, errRecordLimit
				}
				plain, err := c.open.Open(body[:0], nonce(&c.openNon, c.openSalt, c.openSeq), body, hdr)
				if err != nil {
					return nil, errors.New("data stream: a record failed authentication")
				}
				c.openSeq++
				c.rstart += 4 + length
				return plain, nil
			}
			if c.rstart+4+length > len(c.rbuf) { // make room: move the partial record to the front
				c.rfill = copy(c.rbuf, c.rbuf[c.rstart:c.rfill])
				c.rstart = 0
			}
			c.lowat.want(4 + length - avail) // wake up once the rest of the record is here
		} else {
			if c.rstart > 0 && c.rstart == c.rfill {
				c.rstart, c.rfill = 0, 0
			} else if len(c.rbuf)-c.rfill < 4 {
				c.rfill = copy(c.rbuf, c.rbuf[c.rstart:c.rfill])
				c.rstart = 0
			}
			c.lowat.want(4 - avail)
		}
		n, err := c.io.Read(c.rbuf[c.rfill:])
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, err
		}
		c.rfill += n
	}
}
