package main

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"unsafe"
)

type cutFrame struct {
	kind    byte
	payload []byte
}

func framesOf(frames ...cutFrame) []byte {
	var out []byte
	for _, f := range frames {
		out = append(appendHeader(out, f.kind, len(f.payload)), f.payload...)
	}
	return out
}

func testFrames() []cutFrame {
	return []cutFrame{
		{framePacket, bytes.Repeat([]byte{1}, 70000)}, {framePing, []byte("12345678")},
		{framePacket, nil}, {framePacket, bytes.Repeat([]byte{2}, 1500)}, {framePong, []byte("87654321")},
	}
}

func collect(t *testing.T, c *frameCutter, piece []byte, got *[]cutFrame) {
	t.Helper()
	err := c.feed(piece, func(kind byte, payload []byte) error {
		*got = append(*got, cutFrame{kind, append([]byte(nil), payload...)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func sameFrames(t *testing.T, got, want []cutFrame, what string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d frames, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i].kind != want[i].kind || !bytes.Equal(got[i].payload, want[i].payload) {
			t.Fatalf("%s: frame %d differs", what, i)
		}
	}
}

// Whatever the cut between pieces (records of another sender, reads of the SSH channel), the same
// frames come out, in order.
func TestFramesComeOutWholeWhereverTheStreamIsCut(t *testing.T) {
	want := testFrames()
	stream := framesOf(want...)
	for _, cut := range []int{1, 3, 4, 5, 7, 70003, 70004, 70005, len(stream) - 1} {
		c := frameCutter{}
		var got []cutFrame
		collect(t, &c, stream[:cut], &got)
		collect(t, &c, stream[cut:], &got)
		sameFrames(t, got, want, "two pieces")
		if len(c.carry) != 0 {
			t.Fatalf("cut at %d: %d bytes left over", cut, len(c.carry))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		c := frameCutter{}
		var got []cutFrame
		for rest := stream; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(9000))
			collect(t, &c, rest[:n], &got)
			rest = rest[n:]
		}
		sameFrames(t, got, want, "random pieces")
	}
}

// A frame that lies whole in a piece is handed out where it lies: a record's plaintext is not
// copied again on its way to the worker's device.
func TestWholeFramesAreNotCopied(t *testing.T) {
	piece := framesOf(testFrames()...)
	start, end := uintptr(unsafe.Pointer(&piece[0])), uintptr(unsafe.Pointer(&piece[len(piece)-1]))
	c := frameCutter{}
	err := c.feed(piece, func(kind byte, payload []byte) error {
		if len(payload) > 0 {
			if at := uintptr(unsafe.Pointer(&payload[0])); at < start || at > end {
				t.Error("a whole frame was copied out of its piece")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestAnOversizedFrameStopsTheStream(t *testing.T) {
	c := frameCutter{}
	header := appendHeader(nil, framePacket, readBuffer) // longer than a frame may be
	if err := c.feed(header, func(byte, []byte) error { return nil }); err == nil {
		t.Fatal("a frame longer than readBuffer was accepted")
	}
	stop := errors.New("unknown kind")
	if err := c.feed(framesOf(cutFrame{9, nil}), func(byte, []byte) error { return stop }); err != stop {
		t.Fatalf("the handler's error did not stop the stream: %v", err)
	}
}

// Packets read into a batch's tail and committed give the same frames as packets added by copy,
// and the batch, sealed where it lies, reads back as those frames on the peer's side.
func TestABatchReadInPlaceIsSealedInPlaceAndReadsBack(t *testing.T) {
	packets := [][]byte{bytes.Repeat([]byte{5}, 65000), []byte("small"), bytes.Repeat([]byte{6}, packetBufSize)}
	inPlace, copied := newPeerBatch(), newPeerBatch()
	for _, p := range packets {
		tail := inPlace.tail()
		if len(tail) != packetBufSize {
			t.Fatalf("tail of %d bytes, want %d", len(tail), packetBufSize)
		}
		inPlace.commit(copy(tail, p))
		copied.add(p)
	}
	if !bytes.Equal(inPlace.frames(), copied.frames()) || inPlace.packets != len(packets) {
		t.Fatal("committed packets differ from added ones")
	}
	for !inPlace.full() { // a batch that is not full always has room for one more packet
		inPlace.commit(len(inPlace.tail()))
	}
	want := framesOf(cutFrame{framePacket, packets[0]}, cutFrame{framePacket, packets[1]}, cutFrame{framePacket, packets[2]})
	left, right := net.Pipe()
	keys := keysForTest(t)
	sender, receiver := newSealedConn(left, keys, true), newSealedConn(right, keys, false)
	go func() {
		if err := sender.writeRecord(copied.buf); err != nil {
			t.Error(err)
		}
		left.Close()
	}()
	plain, err := receiver.nextRecord()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(plain, want) {
		t.Fatalf("read back %d bytes, want %d", len(plain), len(want))
	}
	if bytes.Contains(copied.buf, packets[1]) {
		t.Fatal("the batch still holds plaintext after sealing")
	}
	if _, err := receiver.nextRecord(); err != io.EOF {
		t.Fatalf("after the batch: %v, want EOF", err)
	}
}

func TestARecordWithoutRoomForItsTagIsRefused(t *testing.T) {
	left, right := net.Pipe()
	defer left.Close()
	defer right.Close()
	s := newSealedConn(left, keysForTest(t), true)
	rec := make([]byte, recordHead+10, recordHead+10+tagSize-1)
	if err := s.writeRecord(rec); err == nil {
		t.Fatal("a record without room for its tag was written")
	}
}
