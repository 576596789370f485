package host_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fibrilgo/fibril/plugins/host"
)

// testPlugin is the testplugin binary (plugins/internal/testplugin), built once
// for the package's tests, and testPluginSHA its digest.
var testPlugin, testPluginSHA string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "plugins-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	testPlugin = filepath.Join(dir, "testplugin")
	build := exec.Command("go", "build", "-o", testPlugin, "github.com/fibrilgo/fibril/plugins/internal/testplugin")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build testplugin:", err)
		return 1
	}
	if testPluginSHA, err = host.FileSHA256(testPlugin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
