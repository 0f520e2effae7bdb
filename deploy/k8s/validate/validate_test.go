// Package validate checks sandcell's Kubernetes manifests (deploy/k8s)
// without a cluster, as the API server would take them: each object is
// decoded by the API server's own strict decoder (sigs.k8s.io/json, what
// `kubectl apply --validate=strict` asks the server for: an unknown,
// duplicate or wrongly cased field is an error) into the API's own Go types
// of k8s.io/api (Kubernetes 1.37), whose json tags are the API's schema:
// a field without omitempty is required. Names and labels go through
// apimachinery's validation, the enums of the fields the manifests use
// through the API's constants. It is a module of its own so that the
// Kubernetes libraries stay out of sandcell's build (they would move its
// protobuf and x/text versions). The flags in the manifests are checked
// against sandcell's real flag set by cmd/sandcell's TestManifestFlags.
package validate

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// kinds are the objects the manifests may hold: anything else is an error
// (a typo in kind or apiVersion would otherwise pass unchecked).
var kinds = map[string]func() any{
	"v1/Namespace":             func() any { return &corev1.Namespace{} },
	"v1/Service":               func() any { return &corev1.Service{} },
	"v1/PersistentVolumeClaim": func() any { return &corev1.PersistentVolumeClaim{} },
	"apps/v1/Deployment":       func() any { return &appsv1.Deployment{} },
	"batch/v1/Job":             func() any { return &batchv1.Job{} },
	"node.k8s.io/v1/RuntimeClass": func() any {
		return &nodev1.RuntimeClass{}
	},
}

// object is one YAML document of a manifest file.
type object struct {
	file string
	doc  int
	json []byte
}

func (o object) String() string { return fmt.Sprintf("%s#%d", o.file, o.doc) }

// manifests reads every YAML file under root but kustomization.yaml (and
// this directory).
func manifests(t *testing.T, root string) []object {
	t.Helper()
	var objs []object
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "validate" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".yaml") || d.Name() == "kustomization.yaml" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, doc := range splitDocs(data) {
			j, err := yaml.YAMLToJSONStrict(doc) // duplicate keys are an error
			if err != nil {
				return fmt.Errorf("%s document %d: %w", path, i, err)
			}
			objs = append(objs, object{file: path, doc: i, json: j})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// splitDocs splits a YAML stream at its "---" lines, dropping empty
// documents.
func splitDocs(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), data...), []byte("\n---\n")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(d []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(d, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// decode is an object's typed value, or every problem the API server's
// strict decoding would report.
func decode(o object) (any, error) {
	var tm metav1.TypeMeta
	if err := json.UnmarshalCaseSensitivePreserveInts(o.json, &tm); err != nil {
		return nil, err
	}
	mk, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("apiVersion %q kind %q: not a kind these manifests use (known: %s)", tm.APIVersion, tm.Kind, strings.Join(slicesSorted(kinds), ", "))
	}
	v := mk()
	strict, err := json.UnmarshalStrict(o.json, v)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, errors.Join(strict...)
	}
	return v, nil
}

func slicesSorted(m map[string]func() any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// required walks v as encoding/json does and reports each field whose json
// tag has no omitempty (the API's required fields) left at its zero value.
func required(v reflect.Value, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			errs = append(errs, required(v.Elem(), path)...)
		}
	case reflect.Slice:
		for i := range v.Len() {
			errs = append(errs, required(v.Index(i), path.Index(i))...)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			errs = append(errs, required(v.MapIndex(k), path.Key(fmt.Sprint(k.Interface())))...)
		}
	case reflect.Struct:
		t := v.Type()
		if t.PkgPath() == "k8s.io/apimachinery/pkg/api/resource" || t.PkgPath() == "k8s.io/apimachinery/pkg/util/intstr" {
			return nil // scalars in JSON, checked by their own UnmarshalJSON
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			if name == "-" {
				continue
			}
			if f.Anonymous && name == "" { // inline, as encoding/json
				errs = append(errs, required(v.Field(i), path)...)
				continue
			}
			if name == "" {
				name = f.Name
			}
			fv := v.Field(i)
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") && fv.IsZero() {
				errs = append(errs, field.Required(path.Child(name), "the API requires it (its json tag has no omitempty)"))
				continue
			}
			errs = append(errs, required(fv, path.Child(name))...)
		}
	}
	return errs
}

// check is the API's validation of what decode cannot see: required
// fields, names, labels and selectors, and the enums the manifests use.
func check(v any) field.ErrorList {
	errs := required(reflect.ValueOf(v), nil)
	meta := reflect.ValueOf(v).Elem().FieldByName("ObjectMeta").Addr().Interface().(*metav1.ObjectMeta)
	namespaced := true
	switch v.(type) {
	case *corev1.Namespace, *nodev1.RuntimeClass:
		namespaced = false
	}
	// The namespace comes from kustomization.yaml (namespace: sandcell).
	m := *meta
	if namespaced && m.Namespace == "" {
		m.Namespace = "sandcell"
	}
	errs = append(errs, apivalidation.ValidateObjectMeta(&m, namespaced, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	pod := func(spec *corev1.PodTemplateSpec, path *field.Path) {
		errs = append(errs, metavalidation.ValidateLabels(spec.Labels, path.Child("metadata", "labels"))...)
		ps := spec.Spec
		if !slices.Contains([]corev1.RestartPolicy{"", corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}, ps.RestartPolicy) {
			errs = append(errs, field.NotSupported(path.Child("spec", "restartPolicy"), ps.RestartPolicy, []string{"Always", "OnFailure", "Never"}))
		}
		vols := map[string]bool{}
		for _, vol := range ps.Volumes {
			vols[vol.Name] = true
			if vol.HostPath != nil && vol.HostPath.Type != nil && !slices.Contains([]corev1.HostPathType{corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory, corev1.HostPathFileOrCreate, corev1.HostPathFile, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev}, *vol.HostPath.Type) {
				errs = append(errs, field.NotSupported[string](path.Child("spec", "volumes").Key(vol.Name), *vol.HostPath.Type, nil))
			}
		}
		for i, c := range ps.Containers {
			cp := path.Child("spec", "containers").Index(i)
			ports := map[string]bool{}
			for _, p := range c.Ports {
				ports[p.Name] = true
			}
			for _, vm := range c.VolumeMounts {
				if !vols[vm.Name] {
					errs = append(errs, field.NotFound(cp.Child("volumeMounts").Key(vm.Name), vm.Name))
				}
			}
			for name, pr := range map[string]*corev1.Probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
				if pr != nil && pr.HTTPGet != nil && pr.HTTPGet.Port.StrVal != "" && !ports[pr.HTTPGet.Port.StrVal] {
					errs = append(errs, field.NotFound(cp.Child(name, "httpGet", "port"), pr.HTTPGet.Port.StrVal))
				}
			}
			if c.Image == "" {
				errs = append(errs, field.Required(cp.Child("image"), "a Deployment's or Job's container needs an image"))
			}
		}
	}
	switch o := v.(type) {
	case *appsv1.Deployment:
		errs = append(errs, metavalidation.ValidateLabelSelector(o.Spec.Selector, metavalidation.LabelSelectorValidationOptions{}, field.NewPath("spec", "selector"))...)
		sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector)
		if err != nil || !sel.Matches(labelSet(o.Spec.Template.Labels)) {
			errs = append(errs, field.Invalid(field.NewPath("spec", "selector"), o.Spec.Selector, "does not match the template's labels"))
		}
		pod(&o.Spec.Template, field.NewPath("spec", "template"))
	case *batchv1.Job:
		if o.Spec.CompletionMode != nil && !slices.Contains([]batchv1.CompletionMode{batchv1.NonIndexedCompletion, batchv1.IndexedCompletion}, *o.Spec.CompletionMode) {
			errs = append(errs, field.NotSupported(field.NewPath("spec", "completionMode"), *o.Spec.CompletionMode, []string{"NonIndexed", "Indexed"}))
		}
		if o.Spec.BackoffLimitPerIndex != nil && (o.Spec.CompletionMode == nil || *o.Spec.CompletionMode != batchv1.IndexedCompletion) {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "backoffLimitPerIndex"), "only for completionMode Indexed"))
		}
		if o.Spec.BackoffLimitPerIndex != nil && o.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "backoffLimitPerIndex"), "needs restartPolicy Never"))
		}
		if rp := o.Spec.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever && rp != corev1.RestartPolicyOnFailure {
			errs = append(errs, field.NotSupported(field.NewPath("spec", "template", "spec", "restartPolicy"), rp, []string{"OnFailure", "Never"}))
		}
		pod(&o.Spec.Template, field.NewPath("spec", "template"))
	case *corev1.Service:
		for i, p := range o.Spec.Ports {
			if p.Protocol != "" && !slices.Contains([]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}, p.Protocol) {
				errs = append(errs, field.NotSupported[string](field.NewPath("spec", "ports").Index(i), p.Protocol, nil))
			}
		}
		if a := o.Spec.SessionAffinity; a != "" && a != corev1.ServiceAffinityNone && a != corev1.ServiceAffinityClientIP {
			errs = append(errs, field.NotSupported(field.NewPath("spec", "sessionAffinity"), a, []string{"None", "ClientIP"}))
		}
		errs = append(errs, metavalidation.ValidateLabels(o.Spec.Selector, field.NewPath("spec", "selector"))...)
	case *corev1.PersistentVolumeClaim:
		for i, m := range o.Spec.AccessModes {
			if !slices.Contains([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod}, m) {
				errs = append(errs, field.NotSupported[string](field.NewPath("spec", "accessModes").Index(i), m, nil))
			}
		}
	}
	return errs
}

type labelSet map[string]string

func (l labelSet) Has(k string) bool   { _, ok := l[k]; return ok }
func (l labelSet) Get(k string) string { return l[k] }
func (l labelSet) Lookup(k string) (string, bool) {
	v, ok := l[k]
	return v, ok
}

// TestManifestsValidate: every object of deploy/k8s decodes strictly into
// its API type and passes the checks above.
func TestManifestsValidate(t *testing.T) {
	objs := manifests(t, "..")
	if len(objs) < 8 {
		t.Fatalf("found %d objects under deploy/k8s; the walk is wrong", len(objs))
	}
	for _, o := range objs {
		v, err := decode(o)
		if err != nil {
			t.Errorf("%s: %v", o, err)
			continue
		}
		for _, e := range check(v) {
			t.Errorf("%s: %v", o, e)
		}
	}
}

// TestValidatorRejects: the checks catch what they are for (each case is a
// manifest of deploy/k8s with one mistake made in it).
func TestValidatorRejects(t *testing.T) {
	var deploy, job object
	for _, o := range manifests(t, "..") {
		switch {
		case strings.HasSuffix(o.file, "mcp.yaml") && o.doc == 0:
			deploy = o
		case strings.HasSuffix(o.file, filepath.Join("batch", "job.yaml")):
			job = o
		}
	}
	if deploy.json == nil || job.json == nil {
		t.Fatal("mcp.yaml's Deployment or batch/job.yaml not found")
	}
	for _, tc := range []struct {
		name     string
		base     object
		old, new string
		want     string
	}{
		{"unknown field", deploy, `"terminationGracePeriodSeconds":`, `"terminationGracePeriod":`, `unknown field "spec.template.spec.terminationGracePeriod"`},
		{"wrong case", deploy, `"readinessProbe":`, `"ReadinessProbe":`, `unknown field`},
		{"wrong type", deploy, `"replicas":2`, `"replicas":"2"`, `cannot unmarshal`},
		{"bad quantity", deploy, `"memory":"8Gi"`, `"memory":"8 gigs"`, `quantities must match`},
		{"missing required", deploy, `,"topologyKey":"kubernetes.io/hostname"`, ``, `topologyKey: Required value`},
		{"selector mismatch", deploy, `"matchLabels":{"app.kubernetes.io/component":"mcp"`, `"matchLabels":{"app.kubernetes.io/component":"other"`, `does not match the template's labels`},
		{"bad name", deploy, `"name":"sandcell-mcp"`, `"name":"Sandcell_MCP"`, `metadata.name: Invalid value`},
		{"probe port", deploy, `"port":"http"`, `"port":"htp"`, `httpGet.port: Not found`},
		{"bad enum", job, `"restartPolicy":"Never"`, `"restartPolicy":"Sometimes"`, `restartPolicy: Unsupported value`},
		{"unknown kind", job, `"kind":"Job"`, `"kind":"Jobb"`, `not a kind these manifests use`},
	} {
		j := string(tc.base.json)
		if !strings.Contains(j, tc.old) {
			t.Errorf("%s: %q is not in %s: %s", tc.name, tc.old, tc.base, j[:min(len(j), 300)])
			continue
		}
		o := tc.base
		o.json = []byte(strings.Replace(j, tc.old, tc.new, 1))
		v, err := decode(o)
		var msgs []string
		if err != nil {
			msgs = append(msgs, err.Error())
		} else {
			for _, e := range check(v) {
				msgs = append(msgs, e.Error())
			}
		}
		if got := strings.Join(msgs, "; "); !strings.Contains(got, tc.want) {
			t.Errorf("%s: got %q, want an error containing %q", tc.name, got, tc.want)
		}
	}
}
