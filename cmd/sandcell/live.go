package main

import (
	"fmt"
	"net"
	"strconv"
	"sync/atomic"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/mcp"
	"github.com/sandcell/sandcell/rest"
)

// liveSandboxesOf is the service's live sandboxes (issue #39),
// service.Service.Live(); nil when it has none. (service.Service itself
// cannot be one: mcp.Sandbox's ReadFile and WriteFile have other
// signatures.)
func liveSandboxesOf(svc *served) api.Sandboxes {
	if l := svc.Service.Live(); l != nil {
		return l
	}
	return nil
}

// liveFrontEnds wires live sandboxes into the server's front ends: the
// MCP tools sandbox and process on srv when the tool profile is "live",
// and the HTTP API with its port proxy on the --http listener (ro; its
// NetworkAllow, the ceiling, makes the sandbox tool offer network). nil
// sb: none of it. The returned setBase tells the tools where --http
// listens, once it does, for port_url.
func liveFrontEnds(sb api.Sandboxes, srv *mcp.Server, ro *rest.Options, sc config.Serve) (setBase func(net.Addr)) {
	if sb == nil {
		return func(net.Addr) {}
	}
	domain := sc.SandboxDomain
	if domain == "" {
		domain = "localhost"
	}
	ro.Sandboxes, ro.SandboxDomain = sb, domain
	var listen atomic.Pointer[string]
	if sc.Tools == config.ToolsLive {
		mcp.AddLiveSandboxTools(srv, sb, &mcp.LiveOptions{Network: len(ro.NetworkAllow) > 0, PortURL: func(id string, port int) string {
			addr := listen.Load()
			if addr == nil {
				return ""
			}
			return portURL(*addr, domain, id, port)
		}})
	}
	return func(a net.Addr) {
		s := a.String()
		listen.Store(&s)
	}
}

// portURL is where the host reaches port of sandbox id through the proxy
// listening on addr: by host name, "http://PORT-ID.DOMAIN:LISTENPORT/".
func portURL(addr, domain, id string, port int) string {
	_, lport, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("http://%s-%s.%s/", strconv.Itoa(port), id, net.JoinHostPort(domain, lport))
}
