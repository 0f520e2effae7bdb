package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/sandcell/sandcell/internal/egress"
)

// Judge0's callbacks (isolate_job.rb call_callback): once a submission
// finished, its default fields, Base64-encoded, are PUT as JSON to its
// callback_url, tried up to CALLBACKS_MAX_TRIES times when the request
// fails, each bounded by CALLBACKS_TIMEOUT.
//
// A callback is the server reaching out to an address a client chose:
// server-side request forgery (CWE-918) to the host's own services, its
// neighbours or the cloud metadata service (169.254.169.254). Judge0
// calls any URL. sandcell calls only the host:port pairs the operator
// allowlisted (--judge0-callback-allow), through the egress proxy's own
// policy (internal/egress: IP literals refused, names resolved by sandcell
// and refused if they resolve to a non-public address unless the operator
// mapped them, the checked address dialled), never through an environment
// proxy, following no redirect, each try bounded in time.
const (
	judge0CallbackTries   = 3
	judge0CallbackTimeout = 5 * time.Second
	// judge0CallbacksInFlight bounds the callbacks under way at once: each
	// may take tries x timeout against a slow host a client named, and a
	// flood of submissions must not pile up goroutines and bodies for it.
	judge0CallbacksInFlight = 64
)

// callbacker PUTs results to allowlisted hosts.
type callbacker struct {
	policy *egress.Proxy
	client *http.Client
	slots  chan struct{} // judge0CallbacksInFlight
}

func newCallbacker(cfg egress.Config) (*callbacker, error) {
	if len(cfg.Allow) == 0 {
		return nil, nil
	}
	p, err := egress.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("the Judge0 callback allowlist: %w", err)
	}
	tr := &http.Transport{
		Proxy: nil, // never an environment proxy: the address dialled is the one checked
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return p.Dial(ctx, addr, "")
		},
		MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second, TLSHandshakeTimeout: judge0CallbackTimeout,
	}
	return &callbacker{policy: p, slots: make(chan struct{}, judge0CallbacksInFlight), client: &http.Client{Transport: tr, Timeout: judge0CallbackTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}, nil
}

// target checks a callback_url: an http or https URL to an allowlisted
// host:port whose name passes the policy now (it is checked again when
// called).
func (c *callbacker) target(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return errors.New("is not an http or https URL")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	ctx, cancel := context.WithTimeout(ctx, judge0CallbackTimeout)
	defer cancel()
	if _, _, err := c.policy.Check(ctx, net.JoinHostPort(u.Hostname(), port), ""); err != nil {
		return fmt.Errorf("is refused: %w", err)
	}
	return nil
}

// call PUTs body to raw, as Judge0 does: a try that got any answer ends
// it; one that failed is tried again, up to judge0CallbackTries.
func (c *callbacker) call(ctx context.Context, raw string, body []byte) error {
	var errs []error
	for range judge0CallbackTries {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, raw, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.client.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// callback PUTs a finished submission to its callback_url, if it has one.
func (j *judge0) callback(sub *submission) {
	if sub.in.callbackURL == nil || j.callbacks == nil {
		return
	}
	out, err := j.render(sub, judge0Default, true)
	if err != nil {
		j.h.log.Warn("judge0 callback: rendering the submission failed", "token", sub.token, "err", err)
		return
	}
	body, err := json.Marshal(out)
	if err != nil {
		j.h.log.Warn("judge0 callback: encoding the submission failed", "token", sub.token, "err", err)
		return
	}
	if err := j.callbacks.call(j.ctx, *sub.in.callbackURL, body); err != nil {
		j.h.log.Warn("judge0 callback failed", "token", sub.token, "url", *sub.in.callbackURL, "err", err)
	}
}
