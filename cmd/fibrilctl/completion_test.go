package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// help, --help and -h list every command of the table, each on one line
// with its summary.
func TestHelpListsEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		r := ctl(t, "", args...)
		mustOK(t, r, strings.Join(args, " "))
		for _, c := range commands {
			re := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(c.name) + ` .*` + regexp.QuoteMeta(c.summary) + `$`)
			if !re.MatchString(r.stdout) {
				t.Errorf("%v: no line for %s in\n%s", args, c.name, r.stdout)
			}
		}
	}
	// help COMMAND is COMMAND --help.
	if r := ctl(t, "", "help", "drain"); r.code != 0 || !strings.Contains(r.stdout, "usage: fibrilctl drain") || !strings.Contains(r.stdout, "-grace") {
		t.Fatalf("help drain: %+v", r)
	}
}

// Every command hands its flag set to the completion generator without
// running (a command that did something before parsing its flags would
// fail here).
func TestCompletionSpecs(t *testing.T) {
	globalFlags, cmds, silent := completionSpecs(context.Background())
	if len(silent) > 0 {
		t.Fatalf("commands that do not parse their flags first (through parseArgs): %v", silent)
	}
	if len(cmds) != len(commands)+1 || len(globalFlags) == 0 {
		t.Fatalf("%d commands, %d global flags", len(cmds), len(globalFlags))
	}
	byName := map[string]cmdSpec{}
	for _, c := range cmds {
		byName[c.name] = c
	}
	has := func(c cmdSpec, flag string) bool {
		for _, f := range c.flags {
			if f.name == flag {
				return true
			}
		}
		return false
	}
	if c := byName["drain"]; !has(c, "node") || !has(c, "grace") || has(c, "addr") {
		t.Errorf("drain flags: %+v", c.flags)
	}
	if c := byName["repartition"]; !has(c, "topic") || !has(c, "group") || !has(c, "partitions") || len(c.subs) != 0 {
		t.Errorf("repartition: %+v", c)
	}
	if got := strings.Join(byName["users"].subs, " "); got != "add passwd list remove allow permissions" {
		t.Errorf("users subcommands: %q", got)
	}
	if got := strings.Join(byName["completion"].subs, " "); got != "bash zsh fish" {
		t.Errorf("completion subcommands: %q", got)
	}
	if len(byName["declare"].subs) != 0 {
		t.Errorf("declare subcommands: %q", byName["declare"].subs)
	}
}

// Each script names every command and every global flag, and parses in
// its shell when that shell is installed.
func TestCompletionScripts(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := ctl(t, "", "completion", shell)
		mustOK(t, r, "completion "+shell)
		for _, c := range commands {
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(c.name) + `\b`).MatchString(r.stdout) {
				t.Errorf("%s script does not mention %s", shell, c.name)
			}
		}
		for _, f := range []string{"addr", "admin-password", "env-file", "timeout"} {
			if !strings.Contains(r.stdout, "--"+f) && !strings.Contains(r.stdout, "-l "+f) {
				t.Errorf("%s script does not mention --%s", shell, f)
			}
		}
		bin, err := exec.LookPath(shell)
		if err != nil {
			t.Logf("%s not installed: syntax not checked", shell)
			continue
		}
		path := filepath.Join(t.TempDir(), "script")
		if err := os.WriteFile(path, []byte(r.stdout), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "-n", path).CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", shell, err, out)
		}
	}
	if r := ctl(t, "", "completion", "tcsh"); r.code != exitUsage {
		t.Errorf("completion tcsh: %+v", r)
	}
	if r := ctl(t, "", "completion"); r.code != exitUsage {
		t.Errorf("completion without a shell: %+v", r)
	}
}

// The bash script completes commands, their flags and subcommands, skips
// flag values and completes file names after --ca.
func TestBashCompletionBehaves(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	r := ctl(t, "", "completion", "bash")
	mustOK(t, r, "completion bash")
	dir := t.TempDir()
	script := filepath.Join(dir, "fibrilctl.bash")
	if err := os.WriteFile(script, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"dr"}, "drain"},
		{[]string{"--addr", "h:1", "un"}, "undrain"},
		{[]string{"users", ""}, "add passwd list remove allow permissions"},
		{[]string{"users", "add", ""}, ""},
		{[]string{"drain", "--n"}, "--node"},
		{[]string{"drain", "--node", ""}, ""},
		{[]string{"--ca", filepath.Join(dir, "ca.")}, filepath.Join(dir, "ca.pem")},
		{[]string{"help", "con"}, "consume connections"},
		{[]string{"completion", "f"}, "fish"},
	} {
		words := append([]string{"fibrilctl"}, tc.words...)
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		prog := `source "$1"; COMP_WORDS=(` + strings.Join(quoted, " ") + `); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _fibrilctl; echo "${COMPREPLY[*]}"`
		out, err := exec.Command(bash, "--norc", "--noprofile", "-c", prog, "bash", script).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.words, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%q: completed %q, want %q", tc.words, got, tc.want)
		}
	}
}
