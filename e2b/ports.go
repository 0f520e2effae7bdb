package e2b

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
)

// proxyPort forwards a request to a port of the sandbox (a server the
// user's code runs, reached by getHost(port) or E2b-Sandbox-Port), over a
// connection api.Sandboxes.DialPort makes; upgrades (WebSocket) pass
// through. E2B's routing headers and the tokens are taken off first: the
// server in the sandbox never sees the credentials that open its envd.
func (h *Handler) proxyPort(w http.ResponseWriter, r *http.Request, t target) {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "127.0.0.1:" + strconv.Itoa(t.port)
			pr.Out.Host = pr.In.Host
			for _, k := range []string{"E2b-Sandbox-Id", "E2b-Sandbox-Port", "X-Access-Token", "E2B-Traffic-Access-Token"} {
				pr.Out.Header.Del(k)
			}
			pr.SetXForwarded()
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return h.sb.DialPort(ctx, t.id, t.port)
			},
			DisableKeepAlives: true,
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// infra's proxy: a closed port is a 502 naming sandbox and port.
			writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": t.id, "port": t.port,
				"message": "the sandbox's port " + strconv.Itoa(t.port) + " is not open: " + err.Error(), "code": http.StatusBadGateway})
		},
	}
	rp.ServeHTTP(w, r)
}
