package main

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

type fakeLink struct {
	counters Counters
}

func (f *fakeLink) stats() *Counters { return &f.counters }

func packet(src, dst string) []byte {
	p := make([]byte, vnetHdrLen+20)
	p[vnetHdrLen] = 0x45
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(p[vnetHdrLen+12:], s[:])
	copy(p[vnetHdrLen+16:], d[:])
	binary.BigEndian.PutUint16(p[vnetHdrLen+2:], 20)
	return p
}

func TestDecisions(t *testing.T) {
	r := newRouter(netip.MustParsePrefix("10.100.0.0/16"))
	worker, peer := &fakeLink{}, &fakeLink{}
	r.setRoute(netip.MustParseAddr("10.100.0.2"), worker)
	r.setRoute(netip.MustParseAddr("10.100.1.2"), peer)
	cases := []struct {
		name   string
		pkt    []byte
		from   Link
		out    Link
		reason string
	}{
		{"worker to peer", packet("10.100.0.2", "10.100.1.2"), worker, peer, ""},
		{"peer to worker", packet("10.100.1.2", "10.100.0.2"), peer, worker, ""},
		{"worker forging a peer's address", packet("10.100.1.2", "10.100.1.2"), worker, nil, dropSpoofed},
		{"worker forging an unallocated address", packet("10.100.0.9", "10.100.1.2"), worker, nil, dropSpoofed},
		{"peer sending from a worker of ours", packet("10.100.0.2", "10.100.0.2"), peer, nil, dropSpoofed},
		{"unallocated destination", packet("10.100.0.2", "10.100.7.7"), worker, nil, dropNoRoute},
		{"another domain's address", packet("10.100.0.2", "10.200.0.1"), worker, nil, dropOutsideDomain},
		{"back where it came from", packet("10.100.0.2", "10.100.0.2"), worker, nil, dropLoop},
		{"truncated", packet("10.100.0.2", "10.100.1.2")[:vnetHdrLen+19], worker, nil, dropTruncated},
	}
	for _, c := range cases {
		out, reason := r.decide(c.pkt, c.from)
		if out != c.out || reason != c.reason {
			t.Errorf("%s: got (%v, %q), want (%v, %q)", c.name, out, reason, c.out, c.reason)
		}
	}
	v6 := packet("10.100.0.2", "10.100.1.2")
	v6[vnetHdrLen] = 0x60
	if _, reason := r.decide(v6, worker); reason != dropNotIPv4 {
		t.Errorf("IPv6: got %q", reason)
	}
}

func TestRemovingALinkRemovesItsRoutes(t *testing.T) {
	r := newRouter(netip.MustParsePrefix("10.100.0.0/16"))
	worker := &fakeLink{}
	r.setRoute(netip.MustParseAddr("10.100.0.2"), worker)
	r.removeLink(worker)
	if r.routeOf(netip.MustParseAddr("10.100.0.2")) != nil {
		t.Fatal("removeLink left a route")
	}
}
