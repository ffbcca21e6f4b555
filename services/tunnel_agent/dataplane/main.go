// Command rlark-tunnel-dp is the data path of one network domain in one cluster's tunnel-agent:
// it moves IP packets between the domain's local workers (TUN devices the Python agent creates in
// the workers' network namespaces and hands over by fd) and the domain's peer clusters (one SSH
// connection each, x/crypto/ssh), by destination address, with strict reverse-path filtering.
//
// The Python agent (forwarder.py, DataplaneForwarder) starts one process per domain, inside the
// network namespace its tunnel sockets belong in, and drives it over a SOCK_SEQPACKET Unix socket
// inherited as fd 3: one JSON request per message (worker fds ride along as SCM_RIGHTS), one JSON
// reply each. When that socket closes the process closes everything and exits, so it never
// outlives its agent. Nothing here logs packets or key material.
//
// Concurrency: a goroutine per worker device (reads), per peer session (reader, batching writer,
// keepalive) and per dialer; the routing table is replaced whole on change and read lock-free.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

type startConfig struct {
	Domain          string  `json:"domain"`
	Network         string  `json:"network"`
	Cluster         string  `json:"cluster"`
	PrivateKey      string  `json:"private_key"`
	ListenHost      string  `json:"listen_host"`
	ListenPort      int     `json:"listen_port"`
	ListenPorts     int     `json:"listen_ports"`
	PingIntervalS   float64 `json:"ping_interval_s"`
	DeadAfterS      float64 `json:"dead_after_s"`
	ConnectTimeoutS float64 `json:"connect_timeout_s"`
	BackoffMaxS     float64 `json:"backoff_max_s"`
	// Transport: "keyed" (frames on a data connection keyed through the SSH session, the default)
	// or "ssh" (frames on the SSH channel itself; about 3x the CPU per byte, ADR 0008).
	Transport string `json:"transport"`
}

func (c *startConfig) keyed() bool { return c.Transport != "ssh" }

func seconds(s float64) time.Duration                { return time.Duration(s * float64(time.Second)) }
func (c *startConfig) connectTimeout() time.Duration { return seconds(c.ConnectTimeoutS) }
func (c *startConfig) backoffMax() time.Duration     { return seconds(c.BackoffMaxS) }

type peerSpec struct {
	Cluster   string  `json:"cluster"`
	PublicKey string  `json:"public_key"`
	Endpoint  *[2]any `json:"endpoint"`
	Via       *string `json:"via"`
}

type request struct {
	Op        string      `json:"op"`
	Start     startConfig `json:"start"`
	Peers     []peerSpec  `json:"peers"`
	Cluster   string      `json:"cluster"`
	Addresses []string    `json:"addresses"`
	Worker    string      `json:"worker"`
	Address   string      `json:"address"`
}

// Dataplane is one domain's forwarder (see the package doc).
type Dataplane struct {
	mu       sync.Mutex
	cfg      startConfig
	router   *Router
	signer   ssh.Signer
	listener net.Listener
	port     int
	specs    map[string]peerSpec
	keys     map[string]ssh.PublicKey
	links    map[string]*peerLink
	dialers  map[string]chan struct{}
	remote   map[string][]netip.Addr
	workers  map[string]*workerLink
	pending  map[[dataIDSize]byte]*pendingData
}

func (d *Dataplane) peerKey(cluster string) ssh.PublicKey {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.keys[cluster]
}

func (d *Dataplane) link(cluster string) *peerLink {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.links[cluster]
}

func (d *Dataplane) start(cfg startConfig) (map[string]any, error) {
	if d.router != nil {
		return nil, errors.New("already started")
	}
	network, err := netip.ParsePrefix(cfg.Network)
	if err != nil || !network.Addr().Is4() {
		return nil, fmt.Errorf("network: not an IPv4 network: %q", cfg.Network)
	}
	signer, err := ssh.ParsePrivateKey([]byte(cfg.PrivateKey))
	if err != nil {
		return nil, fmt.Errorf("private_key: %w", err)
	}
	if cfg.Transport != "" && cfg.Transport != "keyed" && cfg.Transport != "ssh" {
		return nil, fmt.Errorf("transport: %q is neither keyed nor ssh", cfg.Transport)
	}
	if cfg.PingIntervalS <= 0 || cfg.DeadAfterS <= 0 || cfg.ConnectTimeoutS <= 0 || cfg.BackoffMaxS <= 0 {
		return nil, errors.New("ping_interval_s, dead_after_s, connect_timeout_s and backoff_max_s must be > 0")
	}
	ports := []int{0}
	if cfg.ListenPort != 0 {
		ports = ports[:0]
		for p := cfg.ListenPort; p < cfg.ListenPort+max(cfg.ListenPorts, 1); p++ {
			ports = append(ports, p)
		}
	}
	var ln net.Listener
	for _, p := range ports {
		ln, err = net.Listen("tcp4", net.JoinHostPort(cfg.ListenHost, strconv.Itoa(p)))
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return map[string]any{"in_use": true}, err
		}
		return nil, err
	}
	d.cfg, d.signer, d.listener = cfg, signer, ln
	d.port = ln.Addr().(*net.TCPAddr).Port
	d.router = newRouter(network)
	go d.serve(ln)
	return map[string]any{"port": d.port}, nil
}

// setPeers makes the peer set equal to specs (idempotent), as TunnelForwarder.set_peers does.
func (d *Dataplane) setPeers(specs []peerSpec) error {
	wanted := map[string]peerSpec{}
	keys := map[string]ssh.PublicKey{}
	for _, s := range specs {
		if s.Cluster == d.cfg.Cluster {
			return errors.New("peers: a cluster is not its own peer")
		}
		key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(s.PublicKey))
		if err != nil {
			return fmt.Errorf("peers[%s].public_key: %w", s.Cluster, err)
		}
		if s.Endpoint != nil {
			if _, ok := s.Endpoint[0].(string); !ok {
				return fmt.Errorf("peers[%s].endpoint: [host, port] expected", s.Cluster)
			}
			if _, ok := s.Endpoint[1].(float64); !ok {
				return fmt.Errorf("peers[%s].endpoint: [host, port] expected", s.Cluster)
			}
		}
		wanted[s.Cluster], keys[s.Cluster] = s, key
	}
	d.mu.Lock()
	var stops []*peerLink
	for cluster, old := range d.specs {
		if s, ok := wanted[cluster]; !ok || !sameSpec(s, old) {
			stops = append(stops, d.removePeerLocked(cluster)...)
		}
	}
	for cluster, s := range wanted {
		if _, ok := d.specs[cluster]; ok {
			continue
		}
		d.specs[cluster] = s
		if s.Via != nil {
			continue
		}
		d.keys[cluster] = keys[cluster]
		link := newPeerLink(cluster, s.Endpoint != nil, d.router, seconds(d.cfg.PingIntervalS), seconds(d.cfg.DeadAfterS))
		d.links[cluster] = link
		if s.Endpoint != nil {
			stop := make(chan struct{})
			d.dialers[cluster] = stop
			go d.dial(link, s.Endpoint[0].(string), int(s.Endpoint[1].(float64)), keys[cluster], stop)
		}
	}
	for cluster, addresses := range d.remote {
		d.routeRemoteLocked(cluster, addresses)
	}
	d.mu.Unlock()
	for _, l := range stops {
		l.close("peer removed")
	}
	return nil
}

func sameSpec(a, b peerSpec) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func (d *Dataplane) removePeerLocked(cluster string) []*peerLink {
	delete(d.specs, cluster)
	delete(d.keys, cluster)
	if stop, ok := d.dialers[cluster]; ok {
		close(stop)
		delete(d.dialers, cluster)
	}
	var closed []*peerLink
	if link, ok := d.links[cluster]; ok {
		delete(d.links, cluster)
		d.router.removeLink(link)
		closed = append(closed, link)
	}
	for _, a := range d.remote[cluster] {
		d.router.removeRoute(a)
	}
	return closed
}

func (d *Dataplane) routeRemoteLocked(cluster string, addresses []netip.Addr) {
	var link *peerLink
	if s, ok := d.specs[cluster]; ok {
		via := cluster
		if s.Via != nil {
			via = *s.Via
		}
		link = d.links[via]
	}
	for _, a := range addresses {
		if link == nil {
			d.router.removeRoute(a)
		} else {
			d.router.setRoute(a, link)
		}
	}
}

func (d *Dataplane) setRemote(cluster string, raw []string) error {
	addresses := make([]netip.Addr, 0, len(raw))
	for _, s := range raw {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() || !d.router.network.Contains(a) {
			return fmt.Errorf("addresses: %q is not an address of %s", s, d.router.network)
		}
		addresses = append(addresses, a)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	keep := map[netip.Addr]bool{}
	for _, a := range addresses {
		keep[a] = true
	}
	for _, old := range d.remote[cluster] {
		if !keep[old] {
			d.router.removeRoute(old)
		}
	}
	d.remote[cluster] = addresses
	d.routeRemoteLocked(cluster, addresses)
	return nil
}

func (d *Dataplane) attach(worker, address string, fd int) error {
	a, err := netip.ParseAddr(address)
	if err != nil || !a.Is4() || !d.router.network.Contains(a) {
		syscall.Close(fd)
		return fmt.Errorf("address: %q is outside %s", address, d.router.network)
	}
	d.mu.Lock()
	if owner := d.router.routeOf(a); owner != nil && owner != Link(d.workers[worker]) {
		d.mu.Unlock()
		syscall.Close(fd)
		return fmt.Errorf("address: %s is already routed elsewhere", a)
	}
	old := d.workers[worker]
	if old != nil {
		d.router.removeLink(old)
	}
	link, err := newWorkerLink(worker, address, fd)
	if err != nil {
		d.mu.Unlock()
		return err
	}
	d.workers[worker] = link
	d.router.setRoute(a, link)
	d.mu.Unlock()
	if old != nil {
		old.close()
	}
	go link.run(d.router)
	return nil
}

func (d *Dataplane) detach(worker string) {
	d.mu.Lock()
	link := d.workers[worker]
	delete(d.workers, worker)
	if link != nil {
		d.router.removeLink(link)
	}
	d.mu.Unlock()
	if link != nil {
		link.close()
	}
}

func (d *Dataplane) state() map[string]any {
	d.mu.Lock()
	defer d.mu.Unlock()
	peers := []any{}
	for _, l := range d.links {
		peers = append(peers, l.snapshot())
	}
	workers := map[string]any{}
	routes := map[string]string{}
	for name, w := range d.workers {
		workers[name] = w.counters.snapshot()
		routes[w.address] = "worker:" + name
	}
	for cluster, addresses := range d.remote {
		s, ok := d.specs[cluster]
		if !ok {
			continue
		}
		via := cluster
		if s.Via != nil {
			via = *s.Via
		}
		for _, a := range addresses {
			if d.router.routeOf(a) != nil {
				routes[a.String()] = "peer:" + via
			}
		}
	}
	return map[string]any{"port": d.port, "peers": peers, "workers": workers, "routes": routes}
}

func (d *Dataplane) stop() {
	d.mu.Lock()
	if d.listener != nil {
		d.listener.Close()
	}
	var links []*peerLink
	for cluster := range d.specs {
		links = append(links, d.removePeerLocked(cluster)...)
	}
	workers := d.workers
	d.workers = map[string]*workerLink{}
	d.mu.Unlock()
	for _, l := range links {
		l.close("tunnel stopped")
	}
	for _, w := range workers {
		w.close()
	}
}

func (d *Dataplane) handle(req request, fds []int) (map[string]any, error) {
	if req.Op != "start" && d.router == nil {
		closeAll(fds)
		return nil, errors.New("not started")
	}
	if req.Op != "attach" {
		closeAll(fds)
	}
	switch req.Op {
	case "start":
		return d.start(req.Start)
	case "peers":
		return nil, d.setPeers(req.Peers)
	case "remote":
		return nil, d.setRemote(req.Cluster, req.Addresses)
	case "attach":
		if len(fds) != 1 {
			closeAll(fds)
			return nil, fmt.Errorf("attach: one fd expected, got %d", len(fds))
		}
		return nil, d.attach(req.Worker, req.Address, fds[0])
	case "detach":
		d.detach(req.Worker)
		return nil, nil
	case "state":
		return map[string]any{"state": d.state()}, nil
	case "stop":
		d.stop()
		return nil, nil
	}
	return nil, fmt.Errorf("op: unknown %q", req.Op)
}

func closeAll(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}

func main() {
	controlFD := flag.Int("control-fd", 3, "the SOCK_SEQPACKET control socket inherited from the agent")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile (pprof) here until exit")
	flag.Parse()
	if *cpuProfile != "" {
		if f, err := os.Create(*cpuProfile); err == nil {
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	d := &Dataplane{
		specs: map[string]peerSpec{}, keys: map[string]ssh.PublicKey{}, links: map[string]*peerLink{},
		dialers: map[string]chan struct{}{}, remote: map[string][]netip.Addr{}, workers: map[string]*workerLink{},
		pending: map[[dataIDSize]byte]*pendingData{},
	}
	msg := make([]byte, 1<<20)
	oob := make([]byte, syscall.CmsgSpace(4*8))
	for {
		n, oobn, _, _, err := syscall.Recvmsg(*controlFD, msg, oob, syscall.MSG_CMSG_CLOEXEC)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n == 0 {
			break // the agent is gone: close everything
		}
		fds := receivedFDs(oob[:oobn])
		var req request
		var reply map[string]any
		if err = json.Unmarshal(msg[:n], &req); err != nil {
			closeAll(fds)
			err = fmt.Errorf("request is not JSON: %w", err)
		} else {
			reply, err = d.handle(req, fds)
		}
		if reply == nil {
			reply = map[string]any{}
		}
		reply["ok"] = err == nil
		if err != nil {
			reply["error"] = err.Error()
		}
		out, _ := json.Marshal(reply)
		if _, err := syscall.Write(*controlFD, out); err != nil {
			break
		}
		if req.Op == "stop" {
			break
		}
	}
	if d.router != nil {
		d.stop()
	}
}

func receivedFDs(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}
