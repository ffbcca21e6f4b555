package main

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// workerLink is a local worker: its TUN device (created by the Python agent in the worker's network
// namespace and handed over by fd) or any fd that reads and writes one packet per call.
type workerLink struct {
	name     string
	address  string
	file     *os.File
	raw      syscall.RawConn
	counters Counters
	closed   sync.Once
}

func newWorkerLink(name, address string, fd int) (*workerLink, error) {
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("worker %s: fd %d: %w", name, fd, err)
	}
	file := os.NewFile(uintptr(fd), "worker:"+name)
	raw, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("worker %s: fd %d: %w", name, fd, err)
	}
	return &workerLink{name: name, address: address, file: file, raw: raw}, nil
}

func (w *workerLink) stats() *Counters { return &w.counters }

// deliver writes one packet to the worker's device (whole packets: safe from several goroutines).
func (w *workerLink) deliver(pkt []byte) {
	var n int
	var err error
	if cerr := w.raw.Write(func(fd uintptr) bool {
		for n, err = writeNonblocking(fd, pkt); err == syscall.EINTR; {
			n, err = writeNonblocking(fd, pkt)
		}
		return err != syscall.EAGAIN // a full device queue: wait until it takes packets again
	}); cerr != nil {
		err = cerr
	}
	if err != nil {
		w.counters.drop(dropWriteFailed, 1)
		return
	}
	w.counters.out(n)
}

// readBatch bounds the packets read in one wakeup before the batches go out.
const readBatch = 256

// run reads the device until it is closed: per wakeup every waiting packet (up to readBatch) is
// checked and routed; packets for a peer are framed into one batch per peer, written once when
// the device has nothing more (or the batch is full) — one encryption and one socket write for
// many packets, with no hand-off to another goroutine. Each packet is read straight into the
// batch it went to last time (peerBatch.tail), so the usual packet is never copied in this
// process: the kernel writes it there, AES-GCM seals it there.
func (w *workerLink) run(r *Router) {
	raw := w.raw
	spare := make([]byte, packetBufSize) // until a first packet has gone to a peer
	batches := map[*peerLink]*peerBatch{}
	var last *peerBatch // where the previous packet for a peer went: the next is read behind it
	flush := func() {
		for peer, b := range batches {
			if b.packets > 0 {
				peer.writeBatch(b)
			}
		}
	}
	var readErr error
	for readErr == nil {
		err := raw.Read(func(fd uintptr) bool {
			for range readBatch {
				dst := spare
				if last != nil {
					dst = last.tail()
				}
				n, err := readNonblocking(fd, dst)
				if err == syscall.EINTR {
					continue
				}
				if err == syscall.EAGAIN {
					flush()
					return false // wait until the device is readable again
				}
				if err != nil {
					readErr = err
					return true
				}
				w.counters.PacketsIn.Add(1)
				w.counters.BytesIn.Add(uint64(n))
				pkt := dst[:n]
				switch out, reason := r.decide(pkt, w); o := out.(type) {
				case nil:
					w.counters.drop(reason, 1)
				case *workerLink:
					o.deliver(pkt)
				case *peerLink:
					b := batches[o]
					if b == nil {
						b = newPeerBatch()
						batches[o] = b
					}
					var full bool
					if b == last {
						full = b.commit(n)
					} else {
						full = b.add(pkt) // another peer than the last packet's: one copy
					}
					last = b
					if full {
						o.writeBatch(b)
					}
				}
			}
			flush()
			return true
		})
		if err != nil {
			return // the device was closed (detach or stop)
		}
	}
	if !errors.Is(readErr, os.ErrClosed) && readErr != syscall.EBADF {
		w.counters.drop(fmt.Sprintf("read_error:%v", errnoOf(readErr)), 1)
	}
}

func (w *workerLink) close() { w.closed.Do(func() { w.file.Close() }) }

func errnoOf(err error) any {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return int(errno)
	}
	return err
}
