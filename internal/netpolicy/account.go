package netpolicy

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/sandcell/sandcell/api"
)

// Entry is one connection or refusal in a gateway's log, and Log what a
// run's result carries: the first MaxEntries of them, how many more there
// were, and the totals charged to the run. They are the wire's types, so a
// run's result carries the log as it is.
type (
	Entry = api.NetworkEntry
	Log   = api.NetworkLog
)

// MaxEntries bounds a gateway's log: a program that sprays packets gets
// counted, not remembered.
const MaxEntries = 256

type account struct {
	conns    atomic.Int64
	bytesOut atomic.Int64
	bytesIn  atomic.Int64

	mu      sync.Mutex
	entries []*Entry
	omitted int
}

// add records e (bytes may still be added to it) or, past MaxEntries,
// counts it as omitted (kept is false).
func (a *account) add(e Entry) (_ *Entry, kept bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.entries) >= MaxEntries {
		a.omitted++
		return &e, false
	}
	a.entries = append(a.entries, &e)
	return &e, true
}

// finish stores the byte counts of an admitted connection's entry.
func (a *account) finish(e *Entry, out, in int64, refused string) {
	a.mu.Lock()
	e.BytesOut, e.BytesIn, e.Refused = out, in, refused
	a.mu.Unlock()
}

func (a *account) snapshot() Log {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := Log{Omitted: a.omitted, Conns: int(a.conns.Load()), BytesOut: a.bytesOut.Load(), BytesIn: a.bytesIn.Load()}
	for _, e := range a.entries {
		l.Entries = append(l.Entries, *e)
	}
	return l
}

// names are the addresses the gateway's DNS handed out, one per name,
// from NamePool; a connection's destination is looked up here.
type names struct {
	mu     sync.Mutex
	max    int
	byName map[string]netip.Addr
	byAddr map[netip.Addr]string
	next   netip.Addr
}

func (n *names) init(max int) {
	n.max, n.byName, n.byAddr = max, map[string]netip.Addr{}, map[netip.Addr]string{}
	n.next = NamePool.Addr().Next() // not the pool's network address
}

// addr is name's address, handed out now if new; ok is false once the
// budget of names is spent.
func (n *names) addr(name string) (netip.Addr, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a, ok := n.byName[name]; ok {
		return a, true
	}
	if len(n.byName) >= n.max || !NamePool.Contains(n.next) {
		return netip.Addr{}, false
	}
	a := n.next
	n.next = a.Next()
	n.byName[name], n.byAddr[a] = a, name
	return a, true
}

// name is the name a was handed out for.
func (n *names) name(a netip.Addr) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.byAddr[a]
	return s, ok
}
