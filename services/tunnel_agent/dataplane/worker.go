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
	counters Counters
	closed   sync.Once
}

func newWorkerLink(name, address string, fd int) (*workerLink, error) {
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("worker %s: fd %d: %w", name, fd, err)
	}
	return &workerLink{name: name, address: address, file: os.NewFile(uintptr(fd), "worker:"+name)}, nil
}

func (w *workerLink) stats() *Counters { return &w.counters }

// deliver writes one packet to the worker's device (whole packets: safe from several goroutines).
func (w *workerLink) deliver(pkt []byte) {
	n, err := w.file.Write(pkt)
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
// many packets, with no hand-off to another goroutine.
func (w *workerLink) run(r *Router) {
	raw, err := w.file.SyscallConn()
	if err != nil {
		w.counters.drop(fmt.Sprintf("read_error:%v", errnoOf(err)), 1)
		return
	}
	buf := make([]byte, packetBufSize)
	batches := map[*peerLink]*peerBatch{}
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
				n, err := syscall.Read(int(fd), buf)
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
				pkt := buf[:n]
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
					if b.add(pkt) {
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
