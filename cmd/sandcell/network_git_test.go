package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/internal/testutil"
)

// TestNetworkGitClone (issue #40): `git clone` over HTTPS from a server of
// the test's own on loopback, mapped by name (git.test), in the workbench
// language (git is there): the clone gets the repository's file, the
// result's network log lists the connection; a clone from a name outside
// the request's list fails and the log says which name was refused.
func TestNetworkGitClone(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git on the host makes the test's repository: %v", err)
	}
	// A repository served as git's "dumb" HTTP protocol (static files).
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "srv", "repo.git")
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", work},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "first"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("cloned through the policy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-C", work, "add", "README"},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "readme"},
		{"clone", "-q", "--bare", work, bare},
		{"-C", bare, "update-server-info"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	certPEM, cert := selfSigned(t, "git.test")
	srv := httptest.NewUnstartedServer(http.FileServer(http.Dir(filepath.Join(dir, "srv"))))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	h := newDepsHarness(t, func(c *config.Config) {
		c.Network.Allow = map[string][]string{"*": {"git.test", "other.test"}}
		c.Deps.Hosts["git.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		c.Deps.Hosts["other.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	})
	clone := func(host string) api.Result {
		prog := fmt.Sprintf(`cat > /tmp/ca.pem <<'PEM'
%sPEM
export HOME=/tmp
git -c http.sslCAInfo=/tmp/ca.pem clone -q https://%s:%d/repo.git /tmp/r && cat /tmp/r/README
`, certPEM, host, port)
		return h.run(t, api.Request{Language: "workbench", Source: []byte(prog),
			Network: &api.Network{Allow: []string{fmt.Sprintf("git.test:%d", port)}}})
	}
	res := clone("git.test")
	if res.Status != "ok" || res.Stdout != "cloned through the policy\n" {
		t.Fatalf("clone: %s %s\nstdout %q\nstderr %q\nnetwork %+v", res.Status, res.Message, res.Stdout, res.Stderr, res.Network)
	}
	if l := res.Network; l == nil || l.Conns == 0 || l.BytesIn == 0 {
		t.Errorf("network log %+v: want the clone's connections", l)
	}
	// A name the server would allow but this request does not list.
	res = clone("other.test")
	if res.Status == "ok" || res.Network == nil || len(res.Network.Refusals()) == 0 || !strings.Contains(res.Network.Refusals()[0].Refused, "other.test") {
		t.Errorf("clone from an unlisted name: %s, stderr %q, network %+v: want a failure and other.test's refusal", res.Status, res.Stderr, res.Network)
	}
}

// selfSigned is a certificate for name that is its own CA, as PEM (for
// the sandbox's trust) and as the server's.
func selfSigned(t *testing.T, name string) (string, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
