package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sandcell/sandcell/batch"
	"github.com/sandcell/sandcell/internal/health"
)

// manifestDir holds the Kubernetes manifests (deploy/k8s); their schema is
// checked by the nested module deploy/k8s/validate, their flags here.
const manifestDir = "../../deploy/k8s"

// k8sObject is one manifest document, as plain YAML values.
type k8sObject struct {
	file string
	v    map[string]any
}

func (o k8sObject) kind() string { return str(o.v["kind"]) }
func (o k8sObject) name() string { return str(dig(o.v, "metadata", "name")) }

func readManifests(t *testing.T) []k8sObject {
	t.Helper()
	var objs []k8sObject
	err := filepath.WalkDir(manifestDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") || d.Name() == "kustomization.yaml" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var v map[string]any
			if err := dec.Decode(&v); err == io.EOF {
				break
			} else if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if v != nil {
				objs = append(objs, k8sObject{path, v})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any) string { s, _ := v.(string); return s }

func list(v any) []any { l, _ := v.([]any); return l }

func strs(v any) []string {
	var out []string
	for _, x := range list(v) {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

func num(v any) int { n, _ := v.(int); return n }

// sandcellArgv is the sandcell command line a container runs: its args,
// after the command (sandcell itself, or the cgroup-v2 leaf wrapper that
// execs it with "$@").
func sandcellArgv(t *testing.T, o k8sObject, c map[string]any) []string {
	t.Helper()
	cmd := strs(c["command"])
	switch {
	case slices.Equal(cmd, []string{"/usr/local/bin/sandcell"}):
	case len(cmd) == 4 && cmd[0] == "/bin/sh" && cmd[1] == "-c" && cmd[3] == "sandcell" &&
		strings.Contains(cmd[2], `exec /usr/local/bin/sandcell "$@"`):
	default:
		t.Errorf("%s %s: command %q is neither sandcell nor the wrapper that execs it", o.file, o.name(), cmd)
	}
	return strs(c["args"])
}

// expand does Kubernetes' $(VAR) expansion of args with vars.
func expand(t *testing.T, where string, args []string, vars map[string]string) []string {
	t.Helper()
	out := make([]string, len(args))
	for i, a := range args {
		for k, v := range vars {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		if strings.Contains(a, "$(") {
			t.Errorf("%s: %q refers to a variable the container does not define", where, a)
		}
		out[i] = a
	}
	return out
}

// parseArgs parses a command line with sandcell's real flags (the command
// table's), running nothing; it fails the test with sandcell's own message.
func parseArgs(t *testing.T, where string, argv []string) *commandLine {
	t.Helper()
	var stderr bytes.Buffer
	cl, _ := parse(argv, nil, io.Discard, &stderr)
	if cl == nil {
		first, _, _ := strings.Cut(stderr.String(), "\n")
		t.Errorf("%s: sandcell %q does not parse: %s", where, argv, first)
		return nil
	}
	if err := cl.env.cfg.Validate(); err != nil {
		t.Errorf("%s: sandcell %q: %v", where, argv, err)
	}
	return cl
}

func flagValue(cl *commandLine, name string) string {
	if f := cl.fs.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// TestManifestFlags renders the containers' command lines of deploy/k8s
// with the current flags: every one parses with sandcell's real flag set
// (a renamed or removed flag fails here), and what the manifests say
// about sandcell agrees with it: the probes' paths and port are the
// health endpoints on --http's port, the grace period covers the drain,
// the layer cache is mounted at --home, each completion index of the
// Indexed Job is a valid --shard of N = completions writing its own file,
// and the merge Job merges exactly those N files of the same input.
func TestManifestFlags(t *testing.T) {
	objs := readManifests(t)
	var shardJob, mergeJob *commandLine
	var shardFiles []string
	var completions int
	seen := map[string]bool{}
	for _, o := range objs {
		if o.kind() != "Deployment" && o.kind() != "Job" {
			continue
		}
		spec := dig(o.v, "spec", "template", "spec")
		for _, ci := range list(dig(spec, "containers")) {
			c := ci.(map[string]any)
			if str(c["name"]) != "sandcell" {
				continue
			}
			where := fmt.Sprintf("%s %s %s", o.file, o.kind(), o.name())
			seen[o.kind()+"/"+o.name()] = true
			argv := sandcellArgv(t, o, c)
			vars := map[string]string{}
			indexVar := ""
			for _, e := range list(c["env"]) {
				name := str(dig(e, "name"))
				if dig(e, "valueFrom", "fieldRef", "fieldPath") == "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
					indexVar = name
					continue
				}
				vars[name] = str(dig(e, "value"))
			}
			mounts := map[string]string{} // mountPath -> volume
			for _, m := range list(c["volumeMounts"]) {
				mounts[str(dig(m, "mountPath"))] = str(dig(m, "name"))
			}
			volumes := map[string]map[string]any{}
			for _, v := range list(dig(spec, "volumes")) {
				volumes[str(dig(v, "name"))] = v.(map[string]any)
			}
			switch {
			case o.kind() == "Deployment":
				cl := parseArgs(t, where, expand(t, where, argv, vars))
				if cl == nil {
					continue
				}
				checkServe(t, where, cl, o, c)
				checkHome(t, where, cl, mounts, volumes)
			case indexVar != "":
				completions = num(dig(o.v, "spec", "completions"))
				if dig(o.v, "spec", "completionMode") != "Indexed" || completions < 1 {
					t.Errorf("%s: completion index used, but completionMode %v completions %v", where, dig(o.v, "spec", "completionMode"), dig(o.v, "spec", "completions"))
				}
				for _, k := range []int{0, completions - 1} {
					vars[indexVar] = strconv.Itoa(k)
					cl := parseArgs(t, where, expand(t, where, argv, vars))
					if cl == nil || cl.cmd.name != "batch" {
						t.Errorf("%s: index %d is not a batch command", where, k)
						continue
					}
					shardJob = cl
					sh, err := batch.ParseShard(flagValue(cl, "shard"))
					if err != nil || sh.Index != k || sh.Count != completions {
						t.Errorf("%s: completion index %d runs --shard %q (%v); want %d/%d", where, k, flagValue(cl, "shard"), err, k, completions)
					}
					out := flagValue(cl, "out")
					if slices.Contains(shardFiles, out) {
						t.Errorf("%s: two shards write %s", where, out)
					}
					shardFiles = append(shardFiles, out)
					checkHome(t, where, cl, mounts, volumes)
				}
				// All N files, for the merge's check.
				shardFiles = nil
				for k := range completions {
					vars[indexVar] = strconv.Itoa(k)
					shardFiles = append(shardFiles, flagValue(parseArgs(t, where, expand(t, where, argv, vars)), "out"))
				}
			default:
				cl := parseArgs(t, where, expand(t, where, argv, vars))
				if cl == nil {
					continue
				}
				if cl.cmd.name != "batch merge" {
					t.Errorf("%s: a Job without a completion index runs %q, want batch merge", where, cl.cmd.name)
				}
				mergeJob = cl
				if sc := dig(c, "securityContext", "privileged"); sc == true {
					t.Errorf("%s: the merge runs no sandbox and must not be privileged", where)
				}
			}
		}
	}
	for _, want := range []string{"Deployment/sandcell-mcp", "Job/sandcell-batch", "Job/sandcell-merge"} {
		if !seen[want] {
			t.Errorf("no sandcell container in %s", want)
		}
	}
	if shardJob == nil || mergeJob == nil {
		t.FailNow()
	}
	if !slices.Equal(mergeJob.pos, shardFiles) {
		t.Errorf("the merge Job merges %q; the Indexed Job's %d shards write %q", mergeJob.pos, completions, shardFiles)
	}
	for _, f := range []string{"in", "humaneval", "lang", "samples"} {
		if a, b := flagValue(shardJob, f), flagValue(mergeJob, f); a != b {
			t.Errorf("--%s: the batch Job has %q, the merge Job %q (merge needs the same input)", f, a, b)
		}
	}
}

// checkServe checks a serve Deployment: probes on the health endpoints at
// --http's port, the drain within the grace period, Mcp-Session-Id
// routing needs (the headless Service) left to TestManifestServices.
func checkServe(t *testing.T, where string, cl *commandLine, o k8sObject, c map[string]any) {
	t.Helper()
	if cl.cmd.name != "serve" {
		t.Errorf("%s: runs %q, want serve", where, cl.cmd.name)
		return
	}
	_, port, err := net.SplitHostPort(flagValue(cl, "http"))
	if err != nil {
		t.Errorf("%s: --http %q: %v", where, flagValue(cl, "http"), err)
	}
	if host, _, _ := net.SplitHostPort(flagValue(cl, "http")); host != "0.0.0.0" && host != "" {
		t.Errorf("%s: --http %s listens on %s only: the kubelet's probes and the Service come from outside the pod", where, flagValue(cl, "http"), host)
	}
	if flagValue(cl, "auth-token-file") == "" {
		t.Errorf("%s: serving on a non-loopback address without --auth-token-file", where)
	}
	ports := map[string]string{}
	for _, p := range list(c["ports"]) {
		ports[str(dig(p, "name"))] = fmt.Sprint(dig(p, "containerPort"))
	}
	for probe, path := range map[string]string{"readinessProbe": health.ReadyPath, "livenessProbe": health.LivePath} {
		get := dig(c, probe, "httpGet")
		if get == nil {
			t.Errorf("%s: no %s", where, probe)
			continue
		}
		p := fmt.Sprint(dig(get, "port"))
		if named, ok := ports[p]; ok {
			p = named
		}
		if str(dig(get, "path")) != path || p != port {
			t.Errorf("%s: %s is %v on port %s; sandcell serves it at %s on port %s", where, probe, dig(get, "path"), p, path, port)
		}
	}
	drain, err := time.ParseDuration(flagValue(cl, "drain-timeout"))
	if err != nil || drain <= 0 {
		t.Errorf("%s: --drain-timeout %q: the Deployment must drain on SIGTERM", where, flagValue(cl, "drain-timeout"))
	}
	preStop := time.Duration(num(dig(c, "lifecycle", "preStop", "sleep", "seconds"))) * time.Second
	grace := time.Duration(num(dig(o.v, "spec", "template", "spec", "terminationGracePeriodSeconds"))) * time.Second
	if grace < preStop+drain+10*time.Second {
		t.Errorf("%s: terminationGracePeriodSeconds %s < preStop %s + --drain-timeout %s + 10 s: the kubelet would kill runs the drain lets finish", where, grace, preStop, drain)
	}
	if cl.env.cfg.MaxRuns < 1 {
		t.Errorf("%s: --max-runs unset: the default is the node's CPUs, not the pod's", where)
	}
}

// checkHome: --home (the layer store) is a node-local hostPath.
func checkHome(t *testing.T, where string, cl *commandLine, mounts map[string]string, volumes map[string]map[string]any) {
	t.Helper()
	home := cl.env.cfg.LayerDir
	vol, ok := mounts[home]
	if !ok {
		t.Errorf("%s: --home %s is not a volume mount (the layer cache would be the container's own, rebuilt by every pod)", where, home)
		return
	}
	if dig(volumes[vol], "hostPath", "path") == nil {
		t.Errorf("%s: --home %s is volume %s, not a node-local hostPath", where, home, vol)
	}
}

// TestManifestServices: both Services select the Deployment's pods on its
// named port, the headless one lists draining pods too (a gateway pinning
// sessions must reach them), and every manifest file is a resource of a
// kustomization.
func TestManifestServices(t *testing.T) {
	objs := readManifests(t)
	var podLabels map[string]any
	var portNames []string
	for _, o := range objs {
		if o.kind() == "Deployment" && o.name() == "sandcell-mcp" {
			podLabels, _ = dig(o.v, "spec", "template", "metadata", "labels").(map[string]any)
			for _, c := range list(dig(o.v, "spec", "template", "spec", "containers")) {
				for _, p := range list(dig(c, "ports")) {
					portNames = append(portNames, str(dig(p, "name")))
				}
			}
		}
	}
	services := 0
	for _, o := range objs {
		if o.kind() != "Service" {
			continue
		}
		services++
		sel, _ := dig(o.v, "spec", "selector").(map[string]any)
		for k, v := range sel {
			if podLabels[k] != v {
				t.Errorf("Service %s selects %s=%v, which the Deployment's pods do not have", o.name(), k, v)
			}
		}
		for _, p := range list(dig(o.v, "spec", "ports")) {
			if tp := str(dig(p, "targetPort")); !slices.Contains(portNames, tp) {
				t.Errorf("Service %s targets port %q; the pods name %q", o.name(), tp, portNames)
			}
		}
		if dig(o.v, "spec", "clusterIP") == "None" && dig(o.v, "spec", "publishNotReadyAddresses") != true {
			t.Errorf("headless Service %s must publish not-ready (draining) pods", o.name())
		}
	}
	if services != 2 {
		t.Errorf("%d Services, want 2 (sandcell-mcp and the headless sandcell-mcp-pods)", services)
	}
	listed := map[string]bool{}
	kfiles, _ := filepath.Glob(manifestDir + "/kustomization.yaml")
	more, _ := filepath.Glob(manifestDir + "/*/kustomization.yaml")
	deeper, _ := filepath.Glob(manifestDir + "/*/*/kustomization.yaml")
	for _, k := range append(append(kfiles, more...), deeper...) {
		data, err := os.ReadFile(k)
		if err != nil {
			t.Fatal(err)
		}
		var kz struct{ Resources []string }
		if err := yaml.Unmarshal(data, &kz); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		for _, r := range kz.Resources {
			p := filepath.Join(filepath.Dir(k), r)
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s lists %s: %v", k, r, err)
			}
			listed[filepath.Clean(p)] = true
		}
	}
	for _, o := range objs {
		if !listed[filepath.Clean(o.file)] {
			t.Errorf("%s is in no kustomization.yaml's resources", o.file)
		}
	}
}
