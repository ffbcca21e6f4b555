package main

import (
	"bytes"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// Over real TCP the reader sets SO_RCVLOWAT to what its next record still needs: records that
// arrive a few bytes at a time, with pauses, still all arrive (no wakeup is lost), and a record
// whose rest is not here yet leaves the mark at that rest.
func TestRecordsArriveOverTCPWithTheLowWaterMark(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	keys := keysForTest(t)
	want := [][]byte{[]byte("a"), bytes.Repeat([]byte{3}, 200000), bytes.Repeat([]byte{9}, maxRecord), []byte("end")}
	wire := bytes.NewBuffer(record(t, keys, want...))
	go func() {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		raw := wire.Bytes()
		// the first record's header alone, a pause, then the rest in uneven pieces with pauses
		for _, cut := range []int{3, 4, 5, 70000, 150000, -1} { // -1: the rest
			if cut < 0 {
				cut = len(raw)
			}
			if _, err := conn.Write(raw[:cut]); err != nil {
				t.Error(err)
				return
			}
			raw = raw[cut:]
			time.Sleep(20 * time.Millisecond)
			if len(raw) == 0 {
				return
			}
		}
	}()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	receiver := newSealedConn(conn, keys, false)
	got, err := io.ReadAll(receiver)
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Join(want, nil)) {
		t.Fatalf("got %d bytes, want %d", len(got), len(bytes.Join(want, nil)))
	}
	if receiver.lowat.raw == nil {
		t.Fatal("the low-water mark was not set on a TCP connection")
	}
	var mark int
	receiver.lowat.raw.Control(func(fd uintptr) {
		mark, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT)
	})
	if err != nil || mark != 4 {
		t.Fatalf("after the last record the mark is %d (%v), want 4: the next header", mark, err)
	}
}
