package main

import (
	"io"
	"syscall"
	"unsafe"
)

// The worker devices' reads and writes are raw system calls: on a non-blocking fd they cannot
// block, so the Go runtime's bookkeeping around a system call (entersyscall/exitsyscall, which
// wakes the runtime's monitor thread whenever it sleeps) buys nothing and costs per packet.
// An empty buffer is not a packet: it is refused before the call.

func readNonblocking(fd uintptr, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, syscall.EINVAL
	}
	n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func writeNonblocking(fd uintptr, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, syscall.EINVAL
	}
	n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// rawStream reads and writes a non-blocking socket (the keyed stream's TCP connection) with raw
// system calls; the poller still parks the goroutine while there is nothing to read or no room
// to write.
type rawStream struct {
	rc syscall.RawConn
}

func (s rawStream) Read(p []byte) (int, error) {
	var n int
	var err error
	if cerr := s.rc.Read(func(fd uintptr) bool {
		for n, err = readNonblocking(fd, p); err == syscall.EINTR; {
			n, err = readNonblocking(fd, p)
		}
		return err != syscall.EAGAIN
	}); cerr != nil {
		return 0, cerr
	}
	if err == nil && n == 0 {
		return 0, io.EOF
	}
	return n, err
}

func (s rawStream) Write(p []byte) (int, error) {
	written := 0
	var err error
	if cerr := s.rc.Write(func(fd uintptr) bool {
		for written < len(p) {
			var n int
			n, err = writeNonblocking(fd, p[written:])
			switch err {
			case nil:
				written += n
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // the send buffer is full: wait for room
			default:
				return true
			}
		}
		return true
	}); cerr != nil {
		return written, cerr
	}
	return written, err
}
