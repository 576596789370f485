// Package kubernetes holds the Kubernetes example (fibril.yaml,
// secret.yaml, README.md); its test keeps the example true without a
// cluster: it parses the manifests and loads every broker's environment
// through core/config, as the broker would at start.
package kubernetes

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fibrilgo/fibril/core/broker"
	"github.com/fibrilgo/fibril/core/config"
)

const (
	// testNamespace is where the pods are imagined: the manifests name no
	// namespace and take it from the pod (POD_NAMESPACE).
	testNamespace = "fibril-test"
	// clusterDomain is the DNS suffix of Services the manifests assume.
	clusterDomain = "svc.cluster.local"
	// visibilityLabel is the pod label the client Service selects by.
	visibilityLabel = "fibril.io/visibility"
)

// The types below mirror the Kubernetes API fields the manifests use, with
// their exact names. Documents are decoded with unknown fields refused, so
// a misspelt field (readinesProbe) fails here instead of being dropped
// silently by a lenient reader; a new field means a new line here.

// kstr is a scalar that YAML types as a string. Kubernetes refuses an
// unquoted number or boolean where a string belongs (an env value, a label
// value), so these must be strings already in the YAML.
type kstr string

func (s *kstr) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return fmt.Errorf("line %d: %q is a %s, Kubernetes wants a string here: quote it", n.Line, n.Value, n.ShortTag())
	}
	*s = kstr(n.Value)
	return nil
}

// intOrString is Kubernetes' IntOrString: a port number or a port name,
// a count or a percentage.
type intOrString struct {
	val   string
	isInt bool
}

func (v *intOrString) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!str") {
		return fmt.Errorf("line %d: expected a number or a name", n.Line)
	}
	v.val, v.isInt = n.Value, n.ShortTag() == "!!int"
	return nil
}

type objectMeta struct {
	Name   string          `yaml:"name"`
	Labels map[string]kstr `yaml:"labels"`
}

type secret struct {
	APIVersion string          `yaml:"apiVersion"`
	Kind       string          `yaml:"kind"`
	Metadata   objectMeta      `yaml:"metadata"`
	Type       string          `yaml:"type"`
	StringData map[string]kstr `yaml:"stringData"`
	Data       map[string]kstr `yaml:"data"`
}

// value returns a key's value, and whether the Secret has it.
func (s *secret) value(key string) (string, bool) {
	if v, ok := s.StringData[key]; ok {
		return string(v), true
	}
	if v, ok := s.Data[key]; ok {
		b, err := base64.StdEncoding.DecodeString(string(v))
		return string(b), err == nil
	}
	return "", false
}

type service struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   objectMeta `yaml:"metadata"`
	Spec       struct {
		Type                     string          `yaml:"type"`
		ClusterIP                string          `yaml:"clusterIP"`
		PublishNotReadyAddresses bool            `yaml:"publishNotReadyAddresses"`
		SessionAffinity          string          `yaml:"sessionAffinity"`
		Selector                 map[string]kstr `yaml:"selector"`
		Ports                    []servicePort   `yaml:"ports"`
	} `yaml:"spec"`
}

type servicePort struct {
	Name       string      `yaml:"name"`
	Port       int         `yaml:"port"`
	TargetPort intOrString `yaml:"targetPort"`
	Protocol   string      `yaml:"protocol"`
}

type labelSelector struct {
	MatchLabels map[string]kstr `yaml:"matchLabels"`
}

type statefulSet struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   objectMeta `yaml:"metadata"`
	Spec       struct {
		ServiceName         string        `yaml:"serviceName"`
		Replicas            *int          `yaml:"replicas"`
		PodManagementPolicy string        `yaml:"podManagementPolicy"`
		Selector            labelSelector `yaml:"selector"`
		Template            struct {
			Metadata objectMeta `yaml:"metadata"`
			Spec     podSpec    `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []claimTemplate `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

type claimTemplate struct {
	Metadata objectMeta `yaml:"metadata"`
	Spec     struct {
		AccessModes      []string  `yaml:"accessModes"`
		StorageClassName *string   `yaml:"storageClassName"`
		Resources        resources `yaml:"resources"`
	} `yaml:"spec"`
}

type podSpec struct {
	AutomountServiceAccountToken  *bool `yaml:"automountServiceAccountToken"`
	EnableServiceLinks            *bool `yaml:"enableServiceLinks"`
	TerminationGracePeriodSeconds *int  `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot        *bool  `yaml:"runAsNonRoot"`
		RunAsUser           *int64 `yaml:"runAsUser"`
		RunAsGroup          *int64 `yaml:"runAsGroup"`
		FSGroup             *int64 `yaml:"fsGroup"`
		FSGroupChangePolicy string `yaml:"fsGroupChangePolicy"`
		SeccompProfile      struct {
			Type string `yaml:"type"`
		} `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	TopologySpreadConstraints []struct {
		MaxSkew           int           `yaml:"maxSkew"`
		TopologyKey       string        `yaml:"topologyKey"`
		WhenUnsatisfiable string        `yaml:"whenUnsatisfiable"`
		LabelSelector     labelSelector `yaml:"labelSelector"`
	} `yaml:"topologySpreadConstraints"`
	Containers []container `yaml:"containers"`
	Volumes    []struct {
		Name   string `yaml:"name"`
		Secret *struct {
			SecretName  string `yaml:"secretName"`
			DefaultMode *int   `yaml:"defaultMode"`
			Items       []struct {
				Key  string `yaml:"key"`
				Path string `yaml:"path"`
			} `yaml:"items"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
}

type container struct {
	Name            string          `yaml:"name"`
	Image           string          `yaml:"image"`
	ImagePullPolicy string          `yaml:"imagePullPolicy"`
	Ports           []containerPort `yaml:"ports"`
	Env             []struct {
		Name      string `yaml:"name"`
		Value     *kstr  `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	ReadinessProbe  *probe    `yaml:"readinessProbe"`
	LivenessProbe   *probe    `yaml:"livenessProbe"`
	StartupProbe    *probe    `yaml:"startupProbe"`
	Resources       resources `yaml:"resources"`
	SecurityContext struct {
		RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
		RunAsUser                *int64 `yaml:"runAsUser"`
		AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
			Add  []string `yaml:"add"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []volumeMount `yaml:"volumeMounts"`
}

type volumeMount struct {
	Name      string `yaml:"name"`
	MountPath string `yaml:"mountPath"`
	SubPath   string `yaml:"subPath"`
	ReadOnly  bool   `yaml:"readOnly"`
}

type containerPort struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
	Protocol      string `yaml:"protocol"`
}

type probe struct {
	HTTPGet *struct {
		Path   string      `yaml:"path"`
		Port   intOrString `yaml:"port"`
		Scheme string      `yaml:"scheme"`
	} `yaml:"httpGet"`
	InitialDelaySeconds int `yaml:"initialDelaySeconds"`
	PeriodSeconds       int `yaml:"periodSeconds"`
	TimeoutSeconds      int `yaml:"timeoutSeconds"`
	SuccessThreshold    int `yaml:"successThreshold"`
	FailureThreshold    int `yaml:"failureThreshold"`
}

type resources struct {
	Requests map[string]intOrString `yaml:"requests"`
	Limits   map[string]intOrString `yaml:"limits"`
}

type podDisruptionBudget struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   objectMeta `yaml:"metadata"`
	Spec       struct {
		MaxUnavailable *intOrString  `yaml:"maxUnavailable"`
		MinAvailable   *intOrString  `yaml:"minAvailable"`
		Selector       labelSelector `yaml:"selector"`
	} `yaml:"spec"`
}

// manifests is every object of the example's YAML files.
type manifests struct {
	secrets  map[string]*secret
	services []*service
	sets     []*statefulSet
	budgets  []*podDisruptionBudget
}

// kinds maps each kind the example uses to its API version and a new
// object to decode it into.
var kinds = map[string]struct {
	apiVersion string
	new        func() any
}{
	"Secret":              {"v1", func() any { return new(secret) }},
	"Service":             {"v1", func() any { return new(service) }},
	"StatefulSet":         {"apps/v1", func() any { return new(statefulSet) }},
	"PodDisruptionBudget": {"policy/v1", func() any { return new(podDisruptionBudget) }},
}

// loadManifests parses every document of every *.yaml file here: once
// loosely to learn each document's kind, then strictly into that kind's
// type (two decoders over the same stream, so line numbers stay the
// file's own).
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fibril.yaml", "secret.yaml"} {
		if !slices.Contains(files, want) {
			t.Fatalf("%s is missing (found %v)", want, files)
		}
	}
	m := &manifests{secrets: map[string]*secret{}}
	names := map[string]bool{} // kind/name
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		type header struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
			Metadata   struct {
				Name      string `yaml:"name"`
				Namespace string `yaml:"namespace"`
			} `yaml:"metadata"`
		}
		var heads []*header // nil for an empty document
		loose := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var n yaml.Node
			if err := loose.Decode(&n); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if len(n.Content) == 0 || n.Content[0].ShortTag() == "!!null" {
				heads = append(heads, nil)
				continue
			}
			h := new(header)
			if err := n.Decode(h); err != nil {
				t.Fatalf("%s:%d: %v", file, n.Line, err)
			}
			where := fmt.Sprintf("%s:%d", file, n.Content[0].Line)
			switch k, known := kinds[h.Kind]; {
			case h.APIVersion == "" || h.Kind == "" || h.Metadata.Name == "":
				t.Fatalf("%s: every object needs apiVersion, kind and metadata.name (got %q, %q, %q)", where, h.APIVersion, h.Kind, h.Metadata.Name)
			case !known:
				t.Fatalf("%s: kind %s is not one this test knows; teach it (kinds)", where, h.Kind)
			case h.APIVersion != k.apiVersion:
				t.Errorf("%s: %s %s: apiVersion %s, want %s", where, h.Kind, h.Metadata.Name, h.APIVersion, k.apiVersion)
			case h.Metadata.Namespace != "":
				t.Errorf("%s: %s %s names namespace %s; the example is namespace-free (kubectl apply -n)", where, h.Kind, h.Metadata.Name, h.Metadata.Namespace)
			}
			if id := h.Kind + "/" + h.Metadata.Name; names[id] {
				t.Errorf("%s: %s is defined twice", where, id)
			} else {
				names[id] = true
			}
			heads = append(heads, h)
		}

		strict := yaml.NewDecoder(bytes.NewReader(data))
		strict.KnownFields(true)
		for _, h := range heads {
			var obj any = new(yaml.Node) // an empty document, skipped
			what := "an empty document"
			if h != nil {
				obj, what = kinds[h.Kind].new(), h.Kind+" "+h.Metadata.Name
			}
			if err := strict.Decode(obj); err != nil {
				t.Fatalf("%s: %s: %v", file, what, err)
			}
			switch o := obj.(type) {
			case *secret:
				m.secrets[o.Metadata.Name] = o
			case *service:
				m.services = append(m.services, o)
			case *statefulSet:
				m.sets = append(m.sets, o)
			case *podDisruptionBudget:
				m.budgets = append(m.budgets, o)
			}
		}
	}
	if len(m.sets) == 0 {
		t.Fatal("no StatefulSet")
	}
	return m
}

// selects reports whether a selector (non-empty) matches a set of labels.
func selects(selector, labels map[string]kstr) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if l, ok := labels[k]; !ok || l != v {
			return false
		}
	}
	return true
}

// podDNS is a pod's stable name under a StatefulSet's headless Service.
func podDNS(pod, governing string) string {
	return pod + "." + governing + "." + testNamespace + "." + clusterDomain
}

// port returns the port number of a host:port address.
func port(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return -1
	}
	return n
}

// resolvePort turns a port number or a container port name into a number.
func (c *container) resolvePort(p intOrString) (int, bool) {
	if p.isInt {
		n, err := strconv.Atoi(p.val)
		return n, err == nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.val {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// exposes reports whether the container declares a port number.
func (c *container) exposes(n int) bool {
	return slices.ContainsFunc(c.Ports, func(cp containerPort) bool { return cp.ContainerPort == n })
}

// envRef is a Kubernetes dependent-variable reference in an env value.
var envRef = regexp.MustCompile(`\$\(([^)]*)\)`)

// podEnv builds a container's environment the way the kubelet does for
// the pod named podName: values in order, $(VAR) expanded from variables
// defined before it in the list, fieldRefs and secretKeyRefs resolved (the
// latter from the Secrets of the manifests). A reference Kubernetes would
// leave unexpanded is an error here: the broker would get "$(VAR)"
// literally.
func podEnv(c *container, podName string, m *manifests) ([]string, error) {
	defined := map[string]string{}
	var env []string
	var errs []error
	for _, e := range c.Env {
		var val string
		switch {
		case e.Value != nil && e.ValueFrom == nil:
			if strings.Contains(string(*e.Value), "$$") {
				errs = append(errs, fmt.Errorf("%s: $$ escapes are not handled by this test", e.Name))
			}
			val = envRef.ReplaceAllStringFunc(string(*e.Value), func(ref string) string {
				name := ref[2 : len(ref)-1]
				v, ok := defined[name]
				if !ok {
					errs = append(errs, fmt.Errorf("%s refers to $(%s), which is not defined before it", e.Name, name))
					return ref
				}
				return v
			})
		case e.Value == nil && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.SecretKeyRef == nil:
			switch f := e.ValueFrom.FieldRef.FieldPath; f {
			case "metadata.name":
				val = podName
			case "metadata.namespace":
				val = testNamespace
			default:
				errs = append(errs, fmt.Errorf("%s: fieldRef %s is not handled by this test", e.Name, f))
			}
		case e.Value == nil && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.FieldRef == nil:
			ref := e.ValueFrom.SecretKeyRef
			s := m.secrets[ref.Name]
			if s == nil {
				errs = append(errs, fmt.Errorf("%s: no Secret %s in the manifests", e.Name, ref.Name))
				break
			}
			v, ok := s.value(ref.Key)
			if !ok {
				errs = append(errs, fmt.Errorf("%s: Secret %s has no key %s", e.Name, ref.Name, ref.Key))
			}
			val = v
		default:
			errs = append(errs, fmt.Errorf("%s: give exactly one of value, valueFrom.fieldRef, valueFrom.secretKeyRef", e.Name))
		}
		if _, dup := defined[e.Name]; dup {
			errs = append(errs, fmt.Errorf("%s is set twice", e.Name))
		}
		defined[e.Name] = val
		env = append(env, e.Name+"="+val)
	}
	return env, errors.Join(errs...)
}

// mountSecrets writes the files of the container's Secret volumes under
// root, as the kubelet mounts them in the pod, and returns their mount
// paths.
func mountSecrets(root string, spec *podSpec, c *container, m *manifests) ([]string, error) {
	var mounts []string
	for _, vm := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			if vm.SubPath != "" {
				return nil, fmt.Errorf("volume %s: subPath mounts of Secrets are not handled by this test", v.Name)
			}
			s := m.secrets[v.Secret.SecretName]
			if s == nil {
				return nil, fmt.Errorf("volume %s: no Secret %s in the manifests", v.Name, v.Secret.SecretName)
			}
			files := map[string]string{} // path in the volume → key
			for k := range s.StringData {
				files[k] = k
			}
			for k := range s.Data {
				files[k] = k
			}
			if len(v.Secret.Items) > 0 {
				clear(files)
				for _, it := range v.Secret.Items {
					files[it.Path] = it.Key
				}
			}
			for rel, key := range files {
				val, ok := s.value(key)
				if !ok {
					return nil, fmt.Errorf("volume %s: Secret %s has no key %s", v.Name, s.Metadata.Name, key)
				}
				f := filepath.Join(root, filepath.FromSlash(vm.MountPath), filepath.FromSlash(rel))
				if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
					return nil, err
				}
				if err := os.WriteFile(f, []byte(val), 0o600); err != nil {
					return nil, err
				}
			}
			mounts = append(mounts, path.Clean(vm.MountPath))
		}
	}
	return mounts, nil
}

// brokerPod is one pod of a StatefulSet with its loaded configuration.
type brokerPod struct {
	name string
	set  *statefulSet
	cfg  *config.Config
	ld   *config.Loaded
	// root is where the pod's Secret volumes are mounted for the test:
	// file paths in cfg carry it in front of the pod's own path.
	root string
}

func (p *brokerPod) container() *container { return &p.set.Spec.Template.Spec.Containers[0] }

// inPod returns the path a configured file has inside the pod.
func (p *brokerPod) inPod(file string) string { return strings.TrimPrefix(file, p.root) }

// loadPods loads the configuration of every pod of every StatefulSet;
// loading must succeed without a warning.
func loadPods(t *testing.T, m *manifests) []*brokerPod {
	t.Helper()
	var pods []*brokerPod
	for _, s := range m.sets {
		if s.Spec.Replicas == nil || *s.Spec.Replicas < 1 {
			t.Fatalf("StatefulSet %s: replicas must be set and positive", s.Metadata.Name)
		}
		if n := len(s.Spec.Template.Spec.Containers); n != 1 {
			t.Fatalf("StatefulSet %s: %d containers, want the broker alone", s.Metadata.Name, n)
		}
		for i := range *s.Spec.Replicas {
			name := fmt.Sprintf("%s-%d", s.Metadata.Name, i)
			p := &brokerPod{name: name, set: s, root: t.TempDir()}
			env, err := podEnv(p.container(), name, m)
			if err != nil {
				t.Fatalf("pod %s: %v", name, err)
			}
			// Secret files the broker reads at load (the _FILE forms)
			// must exist: mount them under root and point there.
			mounts, err := mountSecrets(p.root, &s.Spec.Template.Spec, p.container(), m)
			if err != nil {
				t.Fatalf("pod %s: %v", name, err)
			}
			for i, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				for _, mp := range mounts {
					if strings.HasPrefix(v, mp+"/") {
						env[i] = k + "=" + filepath.Join(p.root, filepath.FromSlash(v))
					}
				}
			}
			cfg, ld, err := config.Load(nil, env)
			if err != nil {
				t.Fatalf("pod %s: the broker would refuse its configuration:\n%v", name, err)
			}
			for _, w := range ld.Warnings {
				t.Errorf("pod %s: config warning: %s: %s", name, w.Subject, w.Msg)
			}
			p.cfg, p.ld = cfg, ld
			pods = append(pods, p)
		}
	}
	return pods
}

// The example's objects fit together: every StatefulSet is governed by
// the one headless Service; that Service selects every broker and keeps
// not-ready addresses; the client Service selects public brokers only,
// on the client port they advertise.
func TestServices(t *testing.T) {
	m := loadManifests(t)
	pods := loadPods(t, m)

	var headless, clients []*service
	for _, s := range m.services {
		if s.Spec.ClusterIP == "None" {
			headless = append(headless, s)
		} else {
			clients = append(clients, s)
		}
	}
	if len(headless) != 1 || len(clients) != 1 {
		t.Fatalf("%d headless and %d other Services, want one of each", len(headless), len(clients))
	}
	peers, public := headless[0], clients[0]

	if !peers.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: publishNotReadyAddresses must be true: brokers are ready only after they found each other", peers.Metadata.Name)
	}
	for _, s := range m.sets {
		if s.Spec.ServiceName != peers.Metadata.Name {
			t.Errorf("StatefulSet %s: serviceName %q, want the headless Service %s", s.Metadata.Name, s.Spec.ServiceName, peers.Metadata.Name)
		}
		labels := s.Spec.Template.Metadata.Labels
		if !selects(peers.Spec.Selector, labels) {
			t.Errorf("Service %s does not select the pods of %s", peers.Metadata.Name, s.Metadata.Name)
		}
		c := &s.Spec.Template.Spec.Containers[0]
		for _, sp := range peers.Spec.Ports {
			if n, ok := c.resolvePort(sp.TargetPort); !ok || !c.exposes(n) {
				t.Errorf("Service %s: port %s targets %q, which %s does not expose", peers.Metadata.Name, sp.Name, sp.TargetPort.val, s.Metadata.Name)
			}
		}
	}

	publicPods := 0
	for _, p := range pods {
		c := p.container()
		label := string(p.set.Spec.Template.Metadata.Labels[visibilityLabel])
		if label != p.cfg.Broker.Visibility {
			t.Errorf("pod %s: label %s=%q but the broker's visibility is %s", p.name, visibilityLabel, label, p.cfg.Broker.Visibility)
		}
		// The headless Service carries every port the broker listens on,
		// so that the per-pod names work for each of them.
		for _, bind := range []string{p.cfg.Broker.Listener.Bind, p.cfg.Admin.Listener.Bind, p.cfg.Coordination.Raft.Listen} {
			if !slices.ContainsFunc(peers.Spec.Ports, func(sp servicePort) bool {
				n, ok := c.resolvePort(sp.TargetPort)
				return ok && n == port(bind) && sp.Port == n
			}) {
				t.Errorf("Service %s has no port for %s's listener %s", peers.Metadata.Name, p.name, bind)
			}
		}

		selected := selects(public.Spec.Selector, p.set.Spec.Template.Metadata.Labels)
		if isPublic := p.cfg.Broker.Visibility == config.VisibilityPublic; selected != isPublic {
			t.Errorf("Service %s selects pod %s: %v, but its visibility is %s", public.Metadata.Name, p.name, selected, p.cfg.Broker.Visibility)
		}
		if !selected {
			if len(p.cfg.Broker.Listener.Advertise) != 0 {
				t.Errorf("pod %s is private but advertises client addresses %v", p.name, p.cfg.Broker.Listener.Advertise)
			}
			continue
		}
		publicPods++
		if len(public.Spec.Ports) != 1 {
			t.Fatalf("Service %s: %d ports, want the client port alone", public.Metadata.Name, len(public.Spec.Ports))
		}
		sp := public.Spec.Ports[0]
		if n, ok := c.resolvePort(sp.TargetPort); !ok || n != port(p.cfg.Broker.Listener.Bind) {
			t.Errorf("Service %s targets port %q of %s; the client listener is %s", public.Metadata.Name, sp.TargetPort.val, p.name, p.cfg.Broker.Listener.Bind)
		}
		// Clients are sent back to the Service: every public broker
		// advertises its address (a LoadBalancer's name is the operator's).
		want := fmt.Sprintf("%s.%s.%s:%d", public.Metadata.Name, testNamespace, clusterDomain, sp.Port)
		adv := p.cfg.Broker.Listener.Advertise
		switch {
		case len(adv) == 0:
			t.Errorf("pod %s is public but advertises no client address", p.name)
		case public.Spec.Type == "" || public.Spec.Type == "ClusterIP":
			if !slices.Equal(adv, []string{want}) {
				t.Errorf("pod %s advertises %v to clients, want the Service's address [%s]", p.name, adv, want)
			}
		}
	}
	if publicPods == 0 {
		t.Errorf("Service %s selects no broker", public.Metadata.Name)
	}
}

// Each StatefulSet starts its pods at once, selects its own pods only,
// keeps Kubernetes' service variables out of the broker's environment,
// runs the broker unprivileged and gives it the time its graceful shutdown
// takes.
func TestStatefulSets(t *testing.T) {
	m := loadManifests(t)
	for _, s := range m.sets {
		spec, c := &s.Spec.Template.Spec, &s.Spec.Template.Spec.Containers[0]
		where := "StatefulSet " + s.Metadata.Name
		if s.Spec.PodManagementPolicy != "Parallel" {
			t.Errorf("%s: podManagementPolicy %q: the raft quorum needs every broker started at once (Parallel)", where, s.Spec.PodManagementPolicy)
		}
		if !selects(s.Spec.Selector.MatchLabels, s.Spec.Template.Metadata.Labels) {
			t.Errorf("%s: its selector does not match its own pod labels", where)
		}
		for _, other := range m.sets {
			if other != s && selects(s.Spec.Selector.MatchLabels, other.Spec.Template.Metadata.Labels) {
				t.Errorf("%s: its selector also matches the pods of %s", where, other.Metadata.Name)
			}
		}
		if e := spec.EnableServiceLinks; e == nil || *e {
			t.Errorf("%s: enableServiceLinks must be false: the Service named fibril would inject FIBRIL_* variables the broker does not know", where)
		}

		// Unprivileged: the container's settings win over the pod's.
		sc, psc := c.SecurityContext, spec.SecurityContext
		nonRoot, uid := psc.RunAsNonRoot, psc.RunAsUser
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if nonRoot == nil || !*nonRoot || uid == nil || *uid == 0 {
			t.Errorf("%s: the broker must run as non-root with a fixed non-zero uid", where)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation must be false", where)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: readOnlyRootFilesystem must be true (the broker writes to its volumes only)", where)
		}
		if !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: capabilities must drop ALL and add none", where)
		}

		grace := 30 * time.Second // Kubernetes' default
		if spec.TerminationGracePeriodSeconds != nil {
			grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
		}
		if grace <= broker.ShutdownTimeout {
			t.Errorf("%s: terminationGracePeriodSeconds %v, must exceed the broker's shutdown bound %v", where, grace, broker.ShutdownTimeout)
		}
	}
}

// Every broker pod's configuration is what the manifest means: only real
// settings, secrets from a Secret; its node id is its pod name; it listens
// on ports the container declares and is reached at its stable DNS name;
// it keeps its data on its own volume; its admin API, reachable from the
// pod network, asks for a password.
func TestBrokerPods(t *testing.T) {
	m := loadManifests(t)
	pods := loadPods(t, m)

	envNames := map[string]*config.Key{}
	for _, k := range config.Keys() {
		for _, e := range k.Env {
			envNames[e] = k
		}
	}
	ids := map[string]bool{}
	for _, p := range pods {
		s, spec, c, cfg := p.set, &p.set.Spec.Template.Spec, p.container(), p.cfg
		where := "pod " + p.name

		// Every variable with the broker's prefix is one of its settings
		// (or the _FILE form of a secret one); a secret never appears as
		// a literal value: it comes from a Secret, as a variable or as a
		// file of a mounted one.
		for _, e := range c.Env {
			if !strings.HasPrefix(e.Name, "FIBRIL_") {
				continue
			}
			k, fileForm := envNames[e.Name], false
			if base, ok := strings.CutSuffix(e.Name, "_FILE"); k == nil && ok && envNames[base] != nil && envNames[base].Secret {
				k, fileForm = envNames[base], true
			}
			switch {
			case k == nil:
				t.Errorf("%s: %s is not a broker setting", where, e.Name)
			case fileForm && e.Value == nil:
				t.Errorf("%s: %s must name a file of a mounted Secret", where, e.Name)
			case fileForm:
				if err := secretFile(spec, c, string(*e.Value), m); err != nil {
					t.Errorf("%s: %s: %v", where, e.Name, err)
				}
			case k.Secret && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil):
				t.Errorf("%s: %s (%s) is a secret: take it from a Secret (valueFrom.secretKeyRef, or its _FILE form on a mounted Secret)", where, e.Name, k.Name)
			}
		}

		// The cluster secret comes from a Secret: as a file of a mounted
		// Secret, or from a secretKeyRef (checked with the variables).
		switch src := p.ld.Source("coordination.secret_path"); {
		case cfg.Coordination.Secret.IsSet():
		case cfg.Coordination.SecretPath == "":
			t.Errorf("%s: no cluster secret: set FIBRIL_CLUSTER_SECRET_PATH to a file of a mounted Secret", where)
		case src.Layer != config.LayerEnv:
			t.Errorf("%s: coordination.secret_path comes from %s", where, src)
		default:
			if err := secretFile(spec, c, p.inPod(cfg.Coordination.SecretPath), m); err != nil {
				t.Errorf("%s: cluster secret: %v", where, err)
			}
		}
		if !cfg.Admin.Auth.Enabled {
			t.Errorf("%s: admin.auth.enabled is off, but the admin API (drain, users) listens on %s for the whole pod network", where, cfg.Admin.Listener.Bind)
		}
		if f := cfg.Admin.Auth.PasswordFile; f != "" {
			if err := secretFile(spec, c, p.inPod(f), m); err != nil {
				t.Errorf("%s: admin password: %v", where, err)
			}
		}

		if cfg.Coordination.NodeID != p.name {
			t.Errorf("%s: node id %q, want the pod name", where, cfg.Coordination.NodeID)
		}
		if ids[cfg.Coordination.NodeID] {
			t.Errorf("%s: node id %q is used twice", where, cfg.Coordination.NodeID)
		}
		ids[cfg.Coordination.NodeID] = true
		if cfg.Coordination.Backend != "raft" {
			t.Errorf("%s: coordination.backend %q, want raft", where, cfg.Coordination.Backend)
		}

		// Listeners on declared ports; addresses on the pod's own name.
		dns := podDNS(p.name, s.Spec.ServiceName)
		peerPort := port(cfg.Broker.Listener.Bind) // the tcp transport shares the client port
		if cfg.Broker.PeerListener.Bind != "" {
			peerPort = port(cfg.Broker.PeerListener.Bind)
		}
		for what, bind := range map[string]string{
			"broker.listener.bind": cfg.Broker.Listener.Bind, "admin.listener.bind": cfg.Admin.Listener.Bind,
			"coordination.raft.listen": cfg.Coordination.Raft.Listen,
		} {
			if !c.exposes(port(bind)) {
				t.Errorf("%s: %s is %s but the container declares no such port", where, what, bind)
			}
		}
		if want := fmt.Sprintf("%s:%d", dns, peerPort); cfg.Broker.PeerAdvertise != want {
			t.Errorf("%s: broker.peer_advertise %q, want %q", where, cfg.Broker.PeerAdvertise, want)
		}
		if want := fmt.Sprintf("%s:%d", dns, port(cfg.Coordination.Raft.Listen)); cfg.Coordination.Raft.Advertise != want {
			t.Errorf("%s: coordination.raft.advertise %q, want %q", where, cfg.Coordination.Raft.Advertise, want)
		}

		// Data on the pod's own volume.
		if !slices.ContainsFunc(c.VolumeMounts, func(vm volumeMount) bool {
			return path.Clean(vm.MountPath) == path.Clean(cfg.Server.DataDir) && !vm.ReadOnly &&
				slices.ContainsFunc(s.Spec.VolumeClaimTemplates, func(v claimTemplate) bool { return v.Metadata.Name == vm.Name })
		}) {
			t.Errorf("%s: server.data_dir %s is not a writable mount of a volumeClaimTemplate", where, cfg.Server.DataDir)
		}
	}
}

// Readiness asks /readyz, liveness (and startup, if any) /healthz, all on
// the admin listener's port: a broker that is only not ready (recovering,
// draining, cut off from coordination) must never be restarted for it.
func TestProbes(t *testing.T) {
	m := loadManifests(t)
	seen := map[*statefulSet]bool{}
	for _, p := range loadPods(t, m) {
		if seen[p.set] { // one template per StatefulSet
			continue
		}
		seen[p.set] = true
		c, where := p.container(), "StatefulSet "+p.set.Metadata.Name
		adminPort := port(p.cfg.Admin.Listener.Bind)
		scheme := "HTTP"
		if p.cfg.TLS.AdminEnabled {
			scheme = "HTTPS"
		}
		for _, pr := range []struct {
			name     string
			probe    *probe
			path     string
			required bool
		}{
			{"readinessProbe", c.ReadinessProbe, "/readyz", true},
			{"livenessProbe", c.LivenessProbe, "/healthz", true},
			{"startupProbe", c.StartupProbe, "/healthz", false},
		} {
			switch {
			case pr.probe == nil && pr.required:
				t.Errorf("%s: no %s", where, pr.name)
			case pr.probe == nil:
			case pr.probe.HTTPGet == nil:
				t.Errorf("%s: %s must be an httpGet of %s", where, pr.name, pr.path)
			default:
				g := pr.probe.HTTPGet
				if g.Path != pr.path {
					t.Errorf("%s: %s path %q, want %s", where, pr.name, g.Path, pr.path)
				}
				if n, ok := c.resolvePort(g.Port); !ok || n != adminPort {
					t.Errorf("%s: %s port %q, want the admin listener's %d", where, pr.name, g.Port.val, adminPort)
				}
				if got := cmp.Or(g.Scheme, "HTTP"); got != scheme {
					t.Errorf("%s: %s scheme %s, the admin listener speaks %s", where, pr.name, got, scheme)
				}
			}
		}
	}
}

// secretFile checks that a file path the broker reads is a key of a
// Secret of the manifests, mounted into the container.
func secretFile(spec *podSpec, c *container, file string, m *manifests) error {
	for _, vm := range c.VolumeMounts {
		rel, under := strings.CutPrefix(file, path.Clean(vm.MountPath)+"/")
		if !under || vm.SubPath != "" {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			if v.Secret == nil {
				return fmt.Errorf("%s is on volume %s, which is not a Secret", file, v.Name)
			}
			key := rel
			if len(v.Secret.Items) > 0 {
				key = ""
				for _, it := range v.Secret.Items {
					if it.Path == rel {
						key = it.Key
					}
				}
				if key == "" {
					return fmt.Errorf("%s: volume %s projects no item to %s", file, v.Name, rel)
				}
			}
			s := m.secrets[v.Secret.SecretName]
			if s == nil {
				return fmt.Errorf("%s: no Secret %s in the manifests", file, v.Secret.SecretName)
			}
			if _, ok := s.value(key); !ok {
				return fmt.Errorf("%s: Secret %s has no key %s", file, v.Secret.SecretName, key)
			}
			return nil
		}
		return fmt.Errorf("%s: the container mounts volume %s, which the pod does not define", file, vm.Name)
	}
	return fmt.Errorf("%s is on no volume mount of the container", file)
}

// Raft membership is static and must name exactly the pods: every broker
// lists the same peers, one per pod of every StatefulSet (replicas
// counted), at the pod's stable DNS name and raft port;
// bootstrap_expect is the number of voters.
func TestRaftPeers(t *testing.T) {
	m := loadManifests(t)
	pods := loadPods(t, m)

	want := map[string]string{}
	voters := 0
	for _, p := range pods {
		want[p.name] = podDNS(p.name, p.set.Spec.ServiceName) + ":" + strconv.Itoa(port(p.cfg.Coordination.Raft.Listen))
		if p.cfg.Coordination.Raft.Voter {
			voters++
		}
	}
	for _, p := range pods {
		peers, err := p.cfg.Coordination.Raft.ParsedPeers()
		if err != nil {
			t.Fatalf("pod %s: %v", p.name, err)
		}
		got := map[string]string{}
		for _, peer := range peers {
			got[peer.ID] = peer.Addr
		}
		if !maps.Equal(got, want) {
			t.Errorf("pod %s: raft peers\n  %v\nwant every pod of the StatefulSets at its stable name\n  %v", p.name, got, want)
		}
		if got[p.name] != p.cfg.Coordination.Raft.Advertise {
			t.Errorf("pod %s: listed at %s but advertises %s", p.name, got[p.name], p.cfg.Coordination.Raft.Advertise)
		}
		if int(p.cfg.Coordination.Raft.BootstrapExpect) != voters || voters != len(peers) {
			t.Errorf("pod %s: bootstrap_expect %d, %d voters, %d peers listed: all three must agree",
				p.name, p.cfg.Coordination.Raft.BootstrapExpect, voters, len(peers))
		}
	}
	if voters%2 == 0 {
		t.Errorf("%d raft voters: an even count tolerates no more failures than one fewer", voters)
	}
}

// Each StatefulSet has one PodDisruptionBudget, selecting its pods and
// no other set's, allowing one pod down; together the budgets never let
// voluntary disruptions take the raft quorum.
func TestDisruptionBudgets(t *testing.T) {
	m := loadManifests(t)
	pods := loadPods(t, m)

	down := 0
	for _, s := range m.sets {
		var mine []*podDisruptionBudget
		for _, b := range m.budgets {
			if selects(b.Spec.Selector.MatchLabels, s.Spec.Template.Metadata.Labels) {
				mine = append(mine, b)
			}
		}
		if len(mine) != 1 {
			t.Errorf("StatefulSet %s: %d PodDisruptionBudgets select its pods, want 1", s.Metadata.Name, len(mine))
			continue
		}
		b := mine[0]
		mu := b.Spec.MaxUnavailable
		if b.Spec.MinAvailable != nil || mu == nil || !mu.isInt || mu.val != "1" {
			t.Errorf("PodDisruptionBudget %s: want maxUnavailable: 1 and no minAvailable", b.Metadata.Name)
		} else {
			down++
		}
		for _, other := range m.sets {
			if other != s && selects(b.Spec.Selector.MatchLabels, other.Spec.Template.Metadata.Labels) {
				t.Errorf("PodDisruptionBudget %s also selects the pods of %s", b.Metadata.Name, other.Metadata.Name)
			}
		}
	}
	if len(m.budgets) != len(m.sets) {
		t.Errorf("%d PodDisruptionBudgets for %d StatefulSets", len(m.budgets), len(m.sets))
	}
	voters := 0
	for _, p := range pods {
		if p.cfg.Coordination.Raft.Voter {
			voters++
		}
	}
	if tolerated := voters - (voters/2 + 1); down > tolerated {
		t.Errorf("the budgets allow %d brokers down at once; %d voters tolerate %d", down, voters, tolerated)
	}
}
