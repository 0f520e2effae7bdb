package mcp

import (
	"context"
	"strings"
	"testing"
)

// TestClientID: every protocol session's handlers see a name of their
// own (the per-client bounds of a Sandbox key on it).
func TestClientID(t *testing.T) {
	s := NewServer(&Options{Name: "t", Version: "1"})
	a := s.newSession(context.Background(), "stdio", nil)
	b := s.newSession(context.Background(), "stdio", nil)
	defer a.close()
	defer b.close()
	ia, ib := ClientID(a.ctx), ClientID(b.ctx)
	if ia == "" || ia == ib || !strings.HasPrefix(ia, "stdio-") {
		t.Errorf("ClientID of two sessions: %q, %q; want two different stdio- names", ia, ib)
	}
	if got := ClientID(context.Background()); got != "" {
		t.Errorf("ClientID outside a session = %q, want empty", got)
	}
}
