package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestTableIsConsistent checks each row of the key table on its own.
func TestTableIsConsistent(t *testing.T) {
	for _, k := range Keys() {
		t.Run(k.Name, func(t *testing.T) {
			if k.Doc == "" {
				t.Error("no description")
			}
			if strings.Count(k.Name, ".") < 1 {
				t.Error("a key needs a section")
			}
			for _, e := range k.Env {
				if !strings.HasPrefix(e, envPrefix) {
					t.Errorf("env %s lacks the %s prefix", e, envPrefix)
				}
			}
			if len(k.Env) == 0 && k.Kind != KindUsers {
				t.Error("no environment variable")
			}
			if k.Secret && (k.Allows(LayerFile) || k.Allows(LayerFlag) || !k.Allows(LayerEnv)) {
				t.Error("a secret must come from the environment only")
			}
			if k.Class == RuntimeOnly && (k.Allows(LayerFile) || k.Allows(LayerEnv) || k.Allows(LayerFlag)) {
				t.Error("a runtime-only key must not be settable at boot")
			}
			switch k.Kind {
			case KindOptBool:
				if k.Default != nil {
					t.Error("an optional boolean has no default of its own")
				}
				if f := Lookup(k.Follows); f == nil || f.Kind != KindBool {
					t.Errorf("follows %q, which is not a boolean key", k.Follows)
				}
			case KindUsers:
				if k.Default != nil {
					t.Error("seed users default to none")
				}
			default:
				if err := k.validate(k.Default); err != nil {
					t.Errorf("default %v is invalid: %v", k.Default, err)
				}
			}
			wantType := map[Kind]reflect.Type{
				KindString: reflect.TypeFor[string](), KindEnum: reflect.TypeFor[string](),
				KindInt: reflect.TypeFor[int64](), KindBool: reflect.TypeFor[bool](),
				KindList: reflect.TypeFor[[]string](),
			}[k.Kind]
			if wantType != nil && reflect.TypeOf(k.Default) != wantType {
				t.Errorf("default has type %T, want %v", k.Default, wantType)
			}
		})
	}
}

// TestFlagNamesAreUnique guards against two keys claiming one flag.
func TestFlagNamesAreUnique(t *testing.T) {
	seen := map[string]string{FlagConfig: "--config"}
	for _, k := range Keys() {
		for _, f := range k.FlagNames() {
			if other, dup := seen[f]; dup {
				t.Errorf("flag --%s used by %s and %s", f, other, k.Name)
			}
			seen[f] = k.Name
		}
	}
}

// TestStructMatchesTable checks that every key maps to exactly one field of
// Config (or Runtime for runtime-only keys) and every field to a key, with
// a Go type that fits the key's kind.
func TestStructMatchesTable(t *testing.T) {
	goType := map[Kind][]reflect.Kind{
		KindString: {reflect.String}, KindEnum: {reflect.String},
		KindInt: {reflect.Int64}, KindBool: {reflect.Bool}, KindOptBool: {reflect.Bool},
		KindList: {reflect.Slice}, KindUsers: {reflect.Slice},
	}
	check := func(root reflect.Type, idx fieldIndex, want func(*Key) bool, what string) {
		var names []string
		for _, k := range Keys() {
			if !want(k) {
				continue
			}
			names = append(names, k.Name)
			p, ok := idx[k.Name]
			if !ok {
				t.Errorf("%s has no %s field tagged key:%q", k.Name, what, k.Name)
				continue
			}
			f := root.FieldByIndex(p)
			if !slices.Contains(goType[k.Kind], f.Type.Kind()) {
				t.Errorf("%s is a %s but field %s is %v", k.Name, k.Kind, f.Name, f.Type)
			}
			if k.Secret != (f.Type == reflect.TypeFor[Secret]()) {
				t.Errorf("%s: secret=%v but field %s has type %v", k.Name, k.Secret, f.Name, f.Type)
			}
		}
		for tag := range idx {
			if !slices.Contains(names, tag) {
				t.Errorf("%s field tagged key:%q has no matching key in the table", what, tag)
			}
		}
	}
	check(reflect.TypeFor[Config](), configFields, func(k *Key) bool { return k.Class != RuntimeOnly }, "Config")
	check(reflect.TypeFor[Runtime](), runtimeFields, func(k *Key) bool { return k.Class == RuntimeOnly }, "Runtime")
}

// TestEmptyLoadIsDefaults checks that nothing but defaults gives Defaults()
// and that every key reports "default" as its origin.
func TestEmptyLoadIsDefaults(t *testing.T) {
	cfg, ld := mustLoad(t, nil)
	if !reflect.DeepEqual(cfg, Defaults()) {
		t.Errorf("Load(nil, nil) = %+v\nwant %+v", cfg, Defaults())
	}
	if ld.ConfigFile != "" || len(ld.Warnings) != 0 {
		t.Errorf("unexpected file %q or warnings %v", ld.ConfigFile, ld.Warnings)
	}
	for _, k := range Keys() {
		if k.Class == RuntimeOnly {
			continue
		}
		if o := ld.Source(k.Name); o.Layer != LayerDefault {
			t.Errorf("%s: origin %v, want default", k.Name, o)
		}
	}
	// Spot checks of defaults that differ from Fibril's on purpose (loopback
	// binds, raft heartbeat and liveness).
	if cfg.Broker.Listener.Bind != "127.0.0.1:9876" || cfg.Admin.Listener.Bind != "127.0.0.1:8081" ||
		cfg.Coordination.Backend != "none" || cfg.Transport.Backend != "tcp" ||
		cfg.Broker.MaxFrameBytes != 64<<20 || cfg.Broker.MaxMessageBytes != 16<<20 ||
		cfg.Coordination.HeartbeatIntervalMS != 1000 || cfg.Coordination.LivenessTTLMS != 4000 ||
		cfg.TLS.AdminEnabled || cfg.TLS.InterBroker || cfg.Storage.Fsync != FsyncAlways {
		t.Errorf("pinned defaults changed: %+v", cfg)
	}
	if got := ld.Source("tls.admin_enabled").String(); got != "default (follows tls.enabled)" {
		t.Errorf("tls.admin_enabled origin = %q", got)
	}
}

func TestDefaultRuntime(t *testing.T) {
	r := DefaultRuntime()
	want := Routing{
		MaxUpstreamSessions: 4096, MaxUpstreamSessionsPerOwner: 1024, MaxInflightForwardBytes: 268435456,
		ForwardTimeoutMS: 30000, UpstreamConnectTimeoutMS: 5000, UpstreamIdleCloseMS: 30000, DeclarePlacementTimeoutMS: 5000,
		ExposePrivateEndpoints:       false, // private means never advertised, unless the operator says so
		RepartitionAdoptionTimeoutMS: 30000, // S-125
	}
	if r.Routing != want {
		t.Errorf("DefaultRuntime() = %+v, want %+v", r.Routing, want)
	}
	if err := ValidateRuntime(r, Origin{}); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	r.Routing.ForwardTimeoutMS = 0
	if err := ValidateRuntime(r, Origin{}); err == nil || !strings.Contains(err.Error(), "routing.forward_timeout_ms") {
		t.Errorf("ValidateRuntime with a zero timeout = %v", err)
	}
}

// TestSecretsDoNotLeak checks that printing or encoding a Config redacts secrets.
func TestSecretsDoNotLeak(t *testing.T) {
	cfg, _ := mustLoad(t, nil, "FIBRIL_CLUSTER_SECRET=s3cret-cluster", "FIBRIL_ADMIN_AUTH_PASSWORD=s3cret-admin",
		"FIBRIL_AUTH_USERNAME=app", "FIBRIL_AUTH_PASSWORD=s3cret-user")
	if cfg.Coordination.Secret.Reveal() != "s3cret-cluster" || cfg.Admin.Auth.Password.Reveal() != "s3cret-admin" ||
		cfg.Auth.EnvUser.Password.Reveal() != "s3cret-user" {
		t.Fatalf("secrets not loaded: %#v", cfg)
	}
	js, _ := json.Marshal(cfg)
	for _, text := range []string{fmt.Sprintf("%v", cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), string(js)} {
		if strings.Contains(text, "s3cret") {
			t.Errorf("secret leaked: %s", text)
		}
	}
	var b strings.Builder
	if err := WriteEffective(&b, cfg, &Loaded{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "s3cret") {
		t.Errorf("config print leaked a secret:\n%s", b.String())
	}
}
