package main

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
)

// vnetHdrLen is the size of struct virtio_net_hdr that precedes every packet on the worker TUNs
// (IFF_VNET_HDR, see tun.py); it travels unchanged so the receiving kernel takes TSO
// super-packets as they are.
const vnetHdrLen = 10

// Drop reasons: the names of the counters, the same as routing.Drop in Python.
const (
	dropTruncated     = "truncated"
	dropNotIPv4       = "not_ipv4"
	dropSpoofed       = "spoofed"
	dropOutsideDomain = "outside_domain"
	dropNoRoute       = "no_route"
	dropLoop          = "loop"
	dropLinkDown      = "link_down"
	dropWriteFailed   = "write_failed"
)

// Link is where a packet can go: a local worker's device (*workerLink) or a peer cluster's link
// (*peerLink). The readers switch on the type: a worker gets each packet at once, a peer gets the
// packets of one wakeup as one framed batch.
type Link interface {
	stats() *Counters
}

// Counters of one link, as seen by this agent ("in" = received from the link).
type Counters struct {
	PacketsIn, BytesIn, PacketsOut, BytesOut atomic.Uint64
	mu                                       sync.Mutex
	drops                                    map[string]uint64
}

func (c *Counters) drop(reason string, n uint64) {
	c.mu.Lock()
	if c.drops == nil {
		c.drops = map[string]uint64{}
	}
	c.drops[reason] += n
	c.mu.Unlock()
}

func (c *Counters) out(size int) {
	c.PacketsOut.Add(1)
	c.BytesOut.Add(uint64(size))
}

func (c *Counters) snapshot() map[string]any {
	c.mu.Lock()
	drops := make(map[string]uint64, len(c.drops))
	for k, v := range c.drops {
		drops[k] = v
	}
	c.mu.Unlock()
	return map[string]any{
		"packets_in":  c.PacketsIn.Load(),
		"bytes_in":    c.BytesIn.Load(),
		"packets_out": c.PacketsOut.Load(),
		"bytes_out":   c.BytesOut.Load(),
		"drops":       drops,
	}
}

// Router maps each virtual IP of one domain to the link that leads to it, and decides per packet
// (strict reverse-path filtering: a packet is accepted from a link only when the route back to
// its source is that link). Reads are lock-free: the table is replaced whole on every change.
type Router struct {
	network netip.Prefix
	mu      sync.Mutex
	table   atomic.Pointer[map[uint32]Link]
}

func newRouter(network netip.Prefix) *Router {
	r := &Router{network: network.Masked()}
	empty := map[uint32]Link{}
	r.table.Store(&empty)
	return r
}

func key(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

// update applies fn to a copy of the table and publishes it.
func (r *Router) update(fn func(map[uint32]Link)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.table.Load()
	next := make(map[uint32]Link, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	fn(next)
	r.table.Store(&next)
}

func (r *Router) setRoute(a netip.Addr, l Link) {
	r.update(func(t map[uint32]Link) { t[key(a)] = l })
}

func (r *Router) removeRoute(a netip.Addr) {
	r.update(func(t map[uint32]Link) { delete(t, key(a)) })
}

func (r *Router) removeLink(l Link) {
	r.update(func(t map[uint32]Link) {
		for k, v := range t {
			if v == l {
				delete(t, k)
			}
		}
	})
}

func (r *Router) routeOf(a netip.Addr) Link {
	return (*r.table.Load())[key(a)]
}

// decide returns the link pkt (received from from) goes out on, or "" and the drop reason.
func (r *Router) decide(pkt []byte, from Link) (Link, string) {
	if len(pkt) < vnetHdrLen+20 {
		return nil, dropTruncated
	}
	if pkt[vnetHdrLen]>>4 != 4 {
		return nil, dropNotIPv4
	}
	table := *r.table.Load()
	if table[binary.BigEndian.Uint32(pkt[vnetHdrLen+12:])] != from {
		return nil, dropSpoofed
	}
	dst := binary.BigEndian.Uint32(pkt[vnetHdrLen+16:])
	out := table[dst]
	if out == nil {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], dst)
		if r.network.Contains(netip.AddrFrom4(b)) {
			return nil, dropNoRoute
		}
		return nil, dropOutsideDomain
	}
	if out == from {
		return nil, dropLoop
	}
	return out, ""
}

// packetBufSize holds one TUN read: the largest super-packet plus its virtio-net header.
const packetBufSize = 65536 + 64
