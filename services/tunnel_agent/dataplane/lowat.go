package main

import (
	"net"
	"syscall"
)

// lowWater sets a TCP connection's SO_RCVLOWAT to the bytes the reader still needs for its next
// record, so the kernel wakes the reader once per record instead of once per arriving segment
// (a 1 MiB record arrives as many segments; each wakeup is a context switch, which dominated the
// data path's kernel time). A conn that is not TCP (tests' pipes) is left alone.
type lowWater struct {
	raw     syscall.RawConn
	current int
}

// lowatCap bounds the mark: the kernel also caps it at half the receive buffer.
const lowatCap = 512 * 1024

func newLowWater(conn net.Conn) lowWater {
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		return lowWater{}
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return lowWater{}
	}
	return lowWater{raw: raw, current: 1}
}

// want asks to be woken when n more bytes are readable (at least 1, at most lowatCap).
func (l *lowWater) want(n int) {
	n = max(1, min(n, lowatCap))
	if l.raw == nil || n == l.current {
		return
	}
	var err error
	if cerr := l.raw.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
	}); cerr != nil || err != nil {
		l.raw = nil // a mark is an optimisation: without it the reader wakes more often, nothing more
		return
	}
	l.current = n
}
