package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// Frame kinds on a peer link's channel (frames.py): a 4-byte big-endian header, kind in the top 8
// bits, payload length in the low 24, then the payload.
const (
	framePacket = 0
	framePing   = 1
	framePong   = 2
	headerSize  = 4
	maxPayload  = 1<<24 - 1
)

const (
	// batchBytes bounds one channel write: many frames, one SSH write call (x/crypto/ssh cuts it
	// into SSH packets of the peer's maximum size).
	batchBytes = 256 * 1024
	readBuffer = 1 << 20
)

// Link states, as routing/sshlink.py name them.
const (
	stateDown       = "down"
	stateConnecting = "connecting"
	stateUp         = "up"
)

// peerLink is one peer cluster of the domain: its current SSH session (if any), state, counters.
type peerLink struct {
	cluster  string
	dials    bool
	counters Counters
	cur      atomic.Pointer[session]

	mu        sync.Mutex
	state     string
	rtt       time.Duration
	hasRTT    bool
	lastError string
	hasError  bool
	connects  int
	upSince   time.Time

	pingInterval, deadAfter time.Duration
	router                  *Router
}

func newPeerLink(cluster string, dials bool, r *Router, ping, dead time.Duration) *peerLink {
	return &peerLink{cluster: cluster, dials: dials, state: stateDown, router: r, pingInterval: ping, deadAfter: dead}
}

func (p *peerLink) stats() *Counters { return &p.counters }

// peerBatch is the frames of one wakeup's packets towards one peer, laid out as a record of the
// keyed stream (recordHead bytes of room, the frames, room for the tag) so that they are sealed
// where they lie. The worker's reader reads the next packet straight behind the frames (tail),
// and commits it when it goes to this peer: a packet is copied by the kernel into the batch and
// sealed there, never moved in between.
type peerBatch struct {
	buf     []byte
	packets int
}

func newPeerBatch() *peerBatch { return newBatchFor(batchBytes + headerSize + packetBufSize) }

func newBatchFor(frameBytes int) *peerBatch {
	return &peerBatch{buf: make([]byte, recordHead, recordHead+frameBytes+tagSize)}
}

func (b *peerBatch) frames() []byte { return b.buf[recordHead:] }

// full says the batch must go out now.
func (b *peerBatch) full() bool { return len(b.buf)-recordHead >= batchBytes }

// tail is where the next packet can be read to (up to packetBufSize bytes); room for it is
// always there while the batch is not full.
func (b *peerBatch) tail() []byte {
	at := len(b.buf) + headerSize
	return b.buf[at : at+packetBufSize]
}

// commit frames the n bytes read into tail; true when the batch is full.
func (b *peerBatch) commit(n int) bool {
	b.buf = appendHeader(b.buf, framePacket, n)[:len(b.buf)+headerSize+n]
	b.packets++
	return b.full()
}

// add frames a copy of pkt; true when the batch is full.
func (b *peerBatch) add(pkt []byte) bool {
	b.buf = append(appendHeader(b.buf, framePacket, len(pkt)), pkt...)
	b.packets++
	return b.full()
}

// writeBatch writes the batch on the current session (one record) and empties it. It blocks while
// the connection's send buffer is full: the worker's device queue then fills and its TCP slows
// down, as behind a congested NIC.
func (p *peerLink) writeBatch(b *peerBatch) {
	s := p.cur.Load()
	frames := len(b.buf) - recordHead
	if s == nil || !s.writeBatch(b) {
		p.counters.drop(dropLinkDown, uint64(b.packets))
	} else {
		p.counters.PacketsOut.Add(uint64(b.packets))
		p.counters.BytesOut.Add(uint64(frames))
	}
	b.buf, b.packets = b.buf[:recordHead], 0
}

// relay sends one packet received from another peer (a relay cluster's forwarding).
func (p *peerLink) relay(pkt []byte) {
	b := newBatchFor(headerSize + len(pkt))
	b.add(pkt)
	p.writeBatch(b)
}

func (p *peerLink) setConnecting() {
	p.mu.Lock()
	if p.cur.Load() == nil {
		p.state = stateConnecting
	}
	p.mu.Unlock()
}

func (p *peerLink) fail(reason string) {
	p.mu.Lock()
	p.lastError, p.hasError = reason, true
	if p.cur.Load() == nil {
		p.state = stateDown
	}
	p.mu.Unlock()
}

// attach makes a new session the link's current one, replacing (closing) any older one. Frames
// travel on data (the keyed stream) when it is given, else on the SSH channel itself.
func (p *peerLink) attach(conn ssh.Conn, ch ssh.Channel, data *sealedConn) *session {
	s := &session{link: p, conn: conn, rw: ch, done: make(chan struct{}), pongs: make(chan []byte, 1)}
	if data != nil {
		s.rw, s.data = data, data
		go func() { // the channel carries nothing more: its end (or the connection's) ends the session
			io.Copy(io.Discard, ch)
			s.close("ssh channel closed by peer")
		}()
	}
	s.lastRx.Store(time.Now().UnixNano())
	p.mu.Lock()
	old := p.cur.Swap(s)
	p.state = stateUp
	p.upSince = time.Now()
	p.connects++
	p.mu.Unlock()
	if old != nil {
		old.close("replaced by a newer connection")
	}
	go s.reader()
	go s.keepalive()
	go s.watchdog()
	return s
}

// close takes the link down (the current session, if any, with reason).
func (p *peerLink) close(reason string) {
	if s := p.cur.Load(); s != nil {
		s.close(reason)
	}
}

func (p *peerLink) snapshot() map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]any{
		"cluster": p.cluster, "state": p.state, "dials": p.dials, "connects": p.connects,
		"rtt_ms": nil, "last_error": nil, "up_since": nil, "counters": p.counters.snapshot(),
	}
	if p.hasRTT {
		out["rtt_ms"] = float64(p.rtt.Microseconds()) / 1000
	}
	if p.hasError {
		out["last_error"] = p.lastError
	}
	if p.state == stateUp {
		out["up_since"] = float64(p.upSince.UnixNano()) / 1e9
	}
	return out
}

// session is one SSH connection and its frame channel to the peer.
type session struct {
	link   *peerLink
	conn   ssh.Conn
	rw     io.ReadWriter
	data   *sealedConn
	wmu    sync.Mutex // frames are written whole: one writer at a time
	done   chan struct{}
	pongs  chan []byte // PONG frames the reader asks the keepalive goroutine to send
	once   sync.Once
	lastRx atomic.Int64
}

func (s *session) close(reason string) {
	s.once.Do(func() {
		p := s.link
		p.mu.Lock()
		if p.cur.CompareAndSwap(s, nil) {
			p.state = stateDown
			p.lastError, p.hasError = reason, true
		}
		p.mu.Unlock()
		close(s.done)
		if s.data != nil {
			s.data.conn.Close()
		}
		s.conn.Close()
	})
}

func (s *session) write(b []byte) bool {
	s.wmu.Lock()
	_, err := s.rw.Write(b)
	s.wmu.Unlock()
	return s.written(err)
}

// writeBatch writes a batch's frames: sealed in place on the keyed stream (its contents are
// ciphertext afterwards), as they are on the SSH channel.
func (s *session) writeBatch(b *peerBatch) bool {
	s.wmu.Lock()
	var err error
	if s.data != nil {
		err = s.data.writeRecord(b.buf)
	} else {
		_, err = s.rw.Write(b.frames())
	}
	s.wmu.Unlock()
	return s.written(err)
}

func (s *session) written(err error) bool {
	if err != nil {
		s.close(fmt.Sprintf("write failed: %v", err))
		return false
	}
	return true
}

func appendHeader(b []byte, kind byte, n int) []byte {
	return binary.BigEndian.AppendUint32(b, uint32(kind)<<24|uint32(n))
}

// frameCutter cuts the peer's byte stream, which arrives in pieces (records of the keyed stream,
// reads of the SSH channel), into frames. Frames that lie whole in a piece are handed out where
// they lie (a record's plaintext: no copy); only a frame cut between pieces is gathered in carry.
type frameCutter struct {
	carry []byte
}

// feed hands every complete frame of piece (after what an earlier piece left) to each, which
// must be done with the payload when it returns; an error from each, or a frame longer than
// readBuffer allows, stops the stream.
func (c *frameCutter) feed(piece []byte, each func(kind byte, payload []byte) error) error {
	if len(c.carry) > 0 {
		c.carry = append(c.carry, piece...)
		piece = c.carry
	}
	for len(piece) >= headerSize {
		word := binary.BigEndian.Uint32(piece)
		kind, length := byte(word>>24), int(word&maxPayload)
		if length > readBuffer-headerSize {
			return fmt.Errorf("protocol error: frame of %d bytes", length)
		}
		if len(piece) < headerSize+length {
			break
		}
		if err := each(kind, piece[headerSize:headerSize+length]); err != nil {
			return err
		}
		piece = piece[headerSize+length:]
	}
	c.carry = append(c.carry[:0], piece...) // piece may lie in carry: append copies forwards
	return nil
}

// reader cuts what the peer sends into frames: packets are routed (written to a worker's device,
// or queued towards the next peer on a relay), PINGs answered, PONGs timed.
func (s *session) reader() {
	cutter := frameCutter{carry: make([]byte, 0, readBuffer)}
	var next func() ([]byte, error)
	if s.data != nil {
		next = s.data.nextRecord
	} else {
		buf := make([]byte, readBuffer)
		next = func() ([]byte, error) {
			n, err := s.rw.Read(buf)
			return buf[:n], err
		}
	}
	for {
		piece, err := next()
		if err != nil {
			s.close(fmt.Sprintf("channel closed: %v", err))
			return
		}
		s.lastRx.Store(time.Now().UnixNano())
		s.link.counters.BytesIn.Add(uint64(len(piece)))
		if err := cutter.feed(piece, s.frame); err != nil {
			s.close(err.Error())
			return
		}
	}
}

// frame handles one frame from the peer (payload is valid only during the call).
func (s *session) frame(kind byte, payload []byte) error {
	p := s.link
	switch kind {
	case framePacket:
		p.counters.PacketsIn.Add(1)
		switch out, reason := p.router.decide(payload, p); o := out.(type) {
		case nil:
			p.counters.drop(reason, 1)
		case *workerLink:
			o.deliver(payload)
		case *peerLink:
			o.relay(payload)
		}
	case framePing:
		// Answered by the keepalive goroutine: the reader never waits for the write lock,
		// which a writer stuck on a full socket may hold — two agents whose readers both
		// waited there would stop reading each other for good.
		frame := appendHeader(make([]byte, 0, headerSize+len(payload)), framePong, len(payload))
		select {
		case s.pongs <- append(frame, payload...):
		default: // one answer already waits: this PING goes unanswered (RTT is a sample)
		}
	case framePong:
		if len(payload) == 8 {
			sent := int64(binary.BigEndian.Uint64(payload))
			p.mu.Lock()
			p.rtt, p.hasRTT = time.Duration(time.Now().UnixNano()-sent), true
			p.mu.Unlock()
		}
	default:
		return fmt.Errorf("protocol error: unknown frame kind %d", kind)
	}
	return nil
}

// keepalive sends a PING every interval and the PONGs the reader asks for. It may wait for the
// write lock; the watchdog never does.
func (s *session) keepalive() {
	ticker := time.NewTicker(s.link.pingInterval)
	defer ticker.Stop()
	for {
		var frame []byte
		select {
		case <-ticker.C:
			frame = appendHeader(make([]byte, 0, headerSize+8), framePing, 8)
			frame = binary.BigEndian.AppendUint64(frame, uint64(time.Now().UnixNano()))
		case frame = <-s.pongs:
		case <-s.done:
			return
		}
		if !s.write(frame) {
			return
		}
	}
}

// watchdog declares the link dead after deadAfter without a byte from the peer (a cut cable
// does not close a TCP connection for minutes); closing the connections also frees a writer
// stuck on a full socket.
func (s *session) watchdog() {
	p := s.link
	ticker := time.NewTicker(min(p.pingInterval, p.deadAfter) / 4)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
		case <-s.done:
			return
		}
		if silent := time.Duration(time.Now().UnixNano() - s.lastRx.Load()); silent > p.deadAfter {
			s.close(fmt.Sprintf("no frames from peer for %.1f s", silent.Seconds()))
			return
		}
	}
}
