package oci

import (
	"fmt"
	"path"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Network modes of a run. A run's network namespace has only loopback
// either way; in mode egress, a listener on EgressAddr inside it forwards
// each connection to a host-side proxy (Request.Egress), and the
// HTTP(S)_PROXY variables point there. Nothing else of the host network
// is reachable: no interface, no route, no resolver.
const (
	// EgressAddr is the proxy's address inside an egress run.
	EgressAddr = "127.0.0.1:3128"
	egressURL  = "http://" + EgressAddr
)

// egressEnv points HTTP clients (pip, npm, curl, Go, requests) at the
// proxy. NO_PROXY is emptied so that nothing goes around it (there is no
// other way out anyway).
var egressEnv = []string{
	"HTTP_PROXY=" + egressURL, "HTTPS_PROXY=" + egressURL,
	"http_proxy=" + egressURL, "https_proxy=" + egressURL,
	"NO_PROXY=", "no_proxy=",
}

// Mount is an extra bind mount of a run: a dependency layer, read-only
// unless Writable (an install's output directory).
type Mount struct {
	// Source is the absolute host directory.
	Source string
	// Destination is the absolute path inside the container; it must lie
	// in /tmp, the one mountpoint of a root where a directory can be made
	// (a layer's root is read-only), e.g. /tmp/deps.
	Destination string
	Writable    bool
}

// CheckNetwork validates the egress and mount fields of a request.
func (r *Request) CheckNetwork() error {
	if r.Egress != "" && !filepath.IsAbs(r.Egress) {
		return fmt.Errorf("%w: egress socket %q is not an absolute path", ErrInvalidRequest, r.Egress)
	}
	seen := map[string]bool{}
	for _, m := range r.Mounts {
		if !filepath.IsAbs(m.Source) {
			return fmt.Errorf("%w: mount source %q is not an absolute path", ErrInvalidRequest, m.Source)
		}
		d := m.Destination
		if path.Clean(d) != d || len(d) <= len("/tmp/") || d[:len("/tmp/")] != "/tmp/" || seen[d] {
			return fmt.Errorf("%w: mount destination %q must be a clean path in /tmp, given once", ErrInvalidRequest, d)
		}
		seen[d] = true
	}
	return nil
}

// applyNetwork adds the request's extra mounts and, in egress mode, the
// proxy variables to a spec (after the standard mounts: each extra mount
// lands on the run's /tmp tmpfs).
func applyNetwork(s *specs.Spec, req *Request) {
	for _, m := range req.Mounts {
		opts := []string{"rbind", "ro", "nosuid", "nodev"}
		if m.Writable {
			opts[1] = "rw"
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: opts})
	}
	if req.Egress != "" {
		s.Process.Env = append(s.Process.Env, egressEnv...)
	}
}
