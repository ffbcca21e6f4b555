package main

import (
	"bytes"
	"io"
	"net"
	"testing"
)

func keysForTest(t *testing.T) *dataKeys {
	t.Helper()
	k, err := deriveKeys([]byte("session-id"), bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), "d1", "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestRecordsArriveInOrderWhateverTheSplit(t *testing.T) {
	left, right := net.Pipe()
	keys := keysForTest(t)
	sender, receiver := newSealedConn(left, keys, true), newSealedConn(right, keys, false)
	want := [][]byte{[]byte("first"), bytes.Repeat([]byte{7}, 300000), []byte("last")}
	go func() {
		for _, w := range want {
			if _, err := sender.Write(w); err != nil {
				t.Error(err)
			}
		}
		left.Close()
	}()
	got, err := io.ReadAll(receiver)
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Join(want, nil)) {
		t.Fatalf("got %d bytes, want %d", len(got), len(bytes.Join(want, nil)))
	}
}

func TestDirectionsUseDifferentKeys(t *testing.T) {
	keys := keysForTest(t)
	if bytes.Equal(keys.dialKey, keys.serverKey) || bytes.Equal(keys.dialSalt, keys.srvSalt) {
		t.Fatal("both directions share a key or nonce salt")
	}
	other, _ := deriveKeys([]byte("another-session"), bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), "d1", "a", "b")
	if bytes.Equal(keys.dialKey, other.dialKey) || keys.id == other.id {
		t.Fatal("keys do not depend on the SSH session")
	}
}

// record seals msg as the dialer would and returns the bytes on the wire.
func record(t *testing.T, keys *dataKeys, msgs ...[]byte) []byte {
	t.Helper()
	var wire bytes.Buffer
	left, right := net.Pipe()
	done := make(chan struct{})
	go func() { io.Copy(&wire, right); close(done) }()
	s := newSealedConn(left, keys, true)
	for _, m := range msgs {
		if _, err := s.Write(m); err != nil {
			t.Fatal(err)
		}
	}
	left.Close()
	<-done
	return wire.Bytes()
}

func readAll(keys *dataKeys, wire []byte, dialer bool) ([]byte, error) {
	left, right := net.Pipe()
	go func() { left.Write(wire); left.Close() }()
	return io.ReadAll(newSealedConn(right, keys, dialer))
}

func TestAFlippedBitFailsAuthentication(t *testing.T) {
	keys := keysForTest(t)
	wire := record(t, keys, []byte("hello, peer"))
	wire[len(wire)-20] ^= 1
	if _, err := readAll(keys, wire, false); err == nil || err == io.EOF {
		t.Fatalf("tampered record accepted: %v", err)
	}
}

func TestAReplayedOrReorderedRecordFailsAuthentication(t *testing.T) {
	keys := keysForTest(t)
	wire := record(t, keys, []byte("one"), []byte("two"))
	first := wire[:4+3+tagSize]
	second := wire[len(first):]
	for name, w := range map[string][]byte{
		"replayed":  append(append([]byte{}, wire...), first...),
		"reordered": append(append([]byte{}, second...), first...),
	} {
		if _, err := readAll(keys, w, false); err == nil || err == io.EOF {
			t.Fatalf("%s record accepted: %v", name, err)
		}
	}
}

func TestOwnRecordsReflectedBackAreRejected(t *testing.T) {
	keys := keysForTest(t)
	wire := record(t, keys, []byte("to the server"))
	if _, err := readAll(keys, wire, true); err == nil || err == io.EOF { // the dialer reads its own record
		t.Fatalf("reflected record accepted: %v", err)
	}
}

// Over real TCP (raw system calls, rawio.go) records far larger than the socket buffers arrive
// whole: the writer waits for room instead of failing or cutting a record short.
func TestRecordsCrossTCPWhenTheSendBufferFills(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	keys := keysForTest(t)
	var want []byte
	for i := range 24 {
		want = append(want, bytes.Repeat([]byte{byte(i)}, maxRecord-i)...)
	}
	sent := make(chan error, 1)
	go func() {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			sent <- err
			return
		}
		defer conn.Close()
		conn.(*net.TCPConn).SetWriteBuffer(64 * 1024)
		_, err = newSealedConn(conn, keys, true).Write(want)
		sent <- err
	}()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	receiver := newSealedConn(conn, keys, false)
	if _, ok := receiver.io.(rawStream); !ok {
		t.Fatal("a TCP connection is not read with raw system calls")
	}
	got, err := io.ReadAll(receiver)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d", len(got), len(want))
	}
}
