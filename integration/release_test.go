package integration

// The shipping artifacts (docs/deploy.md): scripts/release.sh builds
// static, stamped binaries and a checksummed archive for linux/amd64 (the
// other platforms are `go build` only, in .ci/run); the single-stage
// contrib/swarm image's inputs work as its Dockerfile uses them (CI cannot
// pull or build images); the root multi-stage Dockerfile is checked for
// its structure.

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/core/testkit"
)

// The binaries every release archive holds (".exe" on windows).
var releaseBinaries = []string{"fibril", "fibrilctl", "fibril-coord-raft", "fibril-coord-consul", "fibril-transport-tcpwrap"}

func TestReleaseScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds five binaries; skipped with -short")
	}
	out := t.TempDir()
	const version = "v0.0.0-releasetest"
	cmd := exec.Command("bash", "../scripts/release.sh", "--version", version, "--targets", "linux/amd64", "--out", out)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1764806400")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, b)
	}
	name := "fibril_" + version + "_linux_amd64"
	archive := filepath.Join(out, name+".tar.gz")

	// SHA256SUMS names the archive with its digest.
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	digest := sha256.Sum256(data)
	if want := hex.EncodeToString(digest[:]) + "  " + name + ".tar.gz\n"; string(sums) != want {
		t.Fatalf("SHA256SUMS is %q, want %q", sums, want)
	}

	dir := t.TempDir()
	files := untar(t, archive, dir)
	want := append(slices.Clone(releaseBinaries), "LICENSE", "NOTICE", "README.md", "fibril.example.toml")
	for i := range want {
		want[i] = name + "/" + want[i]
	}
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Fatalf("archive holds %v, want %v", files, want)
	}
	for _, b := range releaseBinaries {
		checkStatic(t, filepath.Join(dir, name, b))
	}

	// The stamps come through: version, commit, the date SOURCE_DATE_EPOCH names.
	bin := filepath.Join(dir, name)
	v := runOut(t, filepath.Join(bin, "fibril"), "version")
	if !strings.HasPrefix(v, "fibril "+version+" (") || !strings.Contains(v, "2025-12-04T00:00:00Z") {
		t.Errorf("fibril version: %q", v)
	}
	if v := runOut(t, filepath.Join(bin, "fibrilctl"), "version", "--client"); !strings.HasPrefix(v, "fibrilctl "+version+" (") {
		t.Errorf("fibrilctl version --client: %q", v)
	}
	// A plugin binary refuses to run without its host, saying so.
	pc := exec.Command(filepath.Join(bin, "fibril-coord-raft"))
	if b, err := pc.CombinedOutput(); err == nil || !strings.Contains(string(b), "plugin") {
		t.Errorf("fibril-coord-raft run by hand: %v %q", err, b)
	}
}

// untar extracts a .tar.gz into dir and returns the regular files' names.
func untar(t *testing.T, archive, dir string) []string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s is owned by %d:%d in the archive, want 0:0", h.Name, h.Uid, h.Gid)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("archive entry %q leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			names = append(names, h.Name)
			w, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(w, tr); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	slices.Sort(names)
	return names
}

// checkStatic fails unless path is an ELF executable with no program
// interpreter and no shared libraries: it runs in a `scratch` image.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s is dynamically linked (program header %v)", filepath.Base(path), p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v", filepath.Base(path), libs)
	}
}

func runOut(t *testing.T, bin string, args ...string) string {
	t.Helper()
	b, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(bin), args, err, b)
	}
	return strings.TrimSpace(string(b))
}

// dockerfile is the instructions of a Dockerfile, continuation lines
// joined, comments left out.
type dockerfile []instruction

type instruction struct{ cmd, args string }

func parseDockerfile(t *testing.T, path string) (dockerfile, string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out dockerfile
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out, string(raw)
}

// final returns the instructions of the last stage.
func (d dockerfile) final() dockerfile {
	last := 0
	for i, in := range d {
		if in.cmd == "FROM" {
			last = i
		}
	}
	return d[last:]
}

func (d dockerfile) all(cmd string) []string {
	var out []string
	for _, in := range d {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// execForm decodes a JSON-array ("exec form") argument.
func execForm(t *testing.T, what, s string) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s is not in exec form (a JSON array; there is no shell in the image): %q", what, s)
	}
	return v
}

// checkRuntimeStage checks what both images' final stages must have: not
// root, /data as the volume and the data directory, the health check
// through `fibril health` (liveness: /healthz) and the broker as the
// entry point, both binaries in /usr/local/bin.
func checkRuntimeStage(t *testing.T, d dockerfile) {
	t.Helper()
	f := d.final()
	if from := f[0].args; from != "scratch" && !strings.HasPrefix(from, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %s; want scratch or distroless-static", from)
	}
	users := f.all("USER")
	if len(users) == 0 || strings.HasPrefix(users[len(users)-1], "0") || strings.HasPrefix(users[len(users)-1], "root") {
		t.Errorf("the image runs as root (USER %v)", users)
	}
	if v := f.all("VOLUME"); !slices.Contains(v, "/data") {
		t.Errorf("VOLUME %v, want /data", v)
	}
	if env := f.all("ENV"); !slices.Contains(env, "FIBRIL_DATA_DIR=/data") {
		t.Errorf("ENV %v lacks FIBRIL_DATA_DIR=/data", env)
	}
	hc := f.all("HEALTHCHECK")
	if len(hc) != 1 {
		t.Fatalf("HEALTHCHECK %v", hc)
	}
	_, cmd, ok := strings.Cut(hc[0], "CMD ")
	if !ok || !slices.Equal(execForm(t, "HEALTHCHECK", cmd), []string{"/usr/local/bin/fibril", "health"}) {
		t.Errorf("HEALTHCHECK %q, want CMD [\"/usr/local/bin/fibril\", \"health\"]", hc[0])
	}
	ep := f.all("ENTRYPOINT")
	if len(ep) != 1 || !slices.Equal(execForm(t, "ENTRYPOINT", ep[0]), []string{"/usr/local/bin/fibril"}) {
		t.Errorf("ENTRYPOINT %v", ep)
	}
}

// The root Dockerfile: a Go build stage on the official image that builds
// both binaries statically, stamped as the release script stamps them,
// and a scratch stage that runs them as described above.
func TestRootDockerfile(t *testing.T) {
	d, raw := parseDockerfile(t, "../Dockerfile")
	froms := d.all("FROM")
	if len(froms) != 2 || !regexp.MustCompile(`^golang:1\.26(\.\d+)?(-\S+)? AS build$`).MatchString(froms[0]) {
		t.Fatalf("FROM %v: want the official Go 1.26 image AS build, then the runtime stage", froms)
	}
	build := strings.Join(d[:len(d)-len(d.final())].all("RUN"), "\n")
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/$b", "for b in fibril fibrilctl",
		"github.com/fibrilgo/fibril/core/buildinfo", ".version=", ".revision=", ".date="} {
		if !strings.Contains(build, want) {
			t.Errorf("the build stage's RUN lacks %q", want)
		}
	}
	checkStamps(t, raw)
	copies := strings.Join(d.final().all("COPY"), "\n")
	for _, want := range []string{"--from=build /out/usr/local/bin/ /usr/local/bin/", "--from=build --chown=65532:65532 /out/data /data"} {
		if !strings.Contains(copies, want) {
			t.Errorf("the final stage does not COPY %s", want)
		}
	}
	checkRuntimeStage(t, d)
}

// checkStamps fails when a Dockerfile or script stamps a variable
// core/buildinfo does not have (the linker ignores an unknown -X name).
func checkStamps(t *testing.T, text string) {
	t.Helper()
	src, err := os.ReadFile("../core/buildinfo/buildinfo.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "var version, revision, date string") {
		t.Fatal("core/buildinfo's stamped variables changed: update the Dockerfile, scripts/release.sh and this test")
	}
	for _, m := range regexp.MustCompile(`\$pkg\.(\w+)=`).FindAllStringSubmatch(text, -1) {
		if !slices.Contains([]string{"version", "revision", "date"}, m[1]) {
			t.Errorf("stamps $pkg.%s, which core/buildinfo does not declare", m[1])
		}
	}
}

func TestReleaseScriptStamps(t *testing.T) {
	b, err := os.ReadFile("../scripts/release.sh")
	if err != nil {
		t.Fatal(err)
	}
	checkStamps(t, string(b))
}

// The contrib/swarm image, as CI can check it without images: its
// Dockerfile has the runtime stage above; the build command its header
// gives yields static binaries; and a broker run the way the image runs
// it (its ENV, the binaries from where the Dockerfile copies them, the
// data directory it creates) passes the image's own health check.
func TestSwarmImage(t *testing.T) {
	d, raw := parseDockerfile(t, "../contrib/swarm/Dockerfile")
	checkRuntimeStage(t, d)
	if froms := d.all("FROM"); len(froms) != 1 {
		t.Fatalf("FROM %v: the local path has one stage", froms)
	}
	copies := d.all("COPY")
	if !slices.Equal(copies, []string{"--chown=65532:65532 rootfs/ /", "fibril fibrilctl /usr/local/bin/"}) {
		t.Fatalf("COPY %v", copies)
	}
	if st, err := os.Stat("../contrib/swarm/rootfs/data"); err != nil || !st.IsDir() {
		t.Fatalf("contrib/swarm/rootfs/data: %v", err)
	}
	m := regexp.MustCompile(`(?m)^#\s+(CGO_ENABLED=0 go build .*)$`).FindStringSubmatch(raw)
	if m == nil {
		t.Fatal("the Dockerfile's header gives no build command")
	}
	// The header's command, with the output directory moved here.
	root := t.TempDir() // the image's file system
	bin := filepath.Join(root, "usr", "local", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	args := strings.Fields(strings.ReplaceAll(m[1], "contrib/swarm/", bin+"/"))
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), args[0])
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", m[1], err, b)
	}
	checkStatic(t, filepath.Join(bin, "fibril"))
	checkStatic(t, filepath.Join(bin, "fibrilctl"))

	// Run it as the image does: ENTRYPOINT with the image's ENV, the data
	// directory at the image's /data, listeners on loopback as the
	// compose file's environment would put them.
	env := os.Environ()
	for _, e := range d.all("ENV") {
		env = append(env, strings.Replace(e, "=/data", "="+filepath.Join(root, "data"), 1))
	}
	if err := os.MkdirAll(filepath.Join(root, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	admin := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	env = append(env, "FIBRIL_BROKER_BIND=127.0.0.1:"+fmt.Sprint(testkit.FreePort(t)), "FIBRIL_ADMIN_BIND="+admin)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	broker := exec.CommandContext(ctx, filepath.Join(bin, "fibril"))
	broker.Env = env
	broker.Cancel = func() error { return broker.Process.Signal(os.Interrupt) }
	logs := &lockedBuffer{}
	broker.Stdout, broker.Stderr = logs, logs
	if err := broker.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = broker.Wait() }()
	hc := execForm(t, "HEALTHCHECK", strings.SplitN(d.all("HEALTHCHECK")[0], "CMD ", 2)[1])
	check := func() (string, error) {
		c := exec.Command(filepath.Join(root, hc[0]), hc[1:]...)
		c.Env = env
		b, err := c.CombinedOutput()
		return string(b), err
	}
	var last string
	testkit.EventuallyReport(t, 30*time.Second, func() bool {
		out, err := check()
		last = out
		return err == nil
	}, func() string {
		return "the image's health check never passed; last: " + last + "\nbroker log:\n" + logs.String()
	})
	if !strings.Contains(last, admin+"/healthz: 200 ok") {
		t.Errorf("health check said %q", last)
	}
}
