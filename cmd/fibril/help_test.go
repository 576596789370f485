package main

import (
	"regexp"
	"strings"
	"testing"
)

// `fibril help` is where a new user looks first, so it names every flag of
// `fibril dev` (--private included): the flag list is read from `fibril dev
// -h`, so a flag added there without a word in the help fails here.
func TestHelpNamesEveryDevFlag(t *testing.T) {
	code, help, _ := runCLI(t, []string{"help"})
	if code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	if !strings.Contains(help, "--private") {
		t.Errorf("fibril help does not mention dev --private:\n%s", help)
	}
	code, _, devUsage := runCLI(t, []string{"dev", "-h"})
	if code != 0 {
		t.Fatalf("dev -h: exit %d", code)
	}
	flags := regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)`).FindAllStringSubmatch(devUsage, -1)
	if len(flags) < 2 {
		t.Fatalf("dev -h lists %d flags; cannot read its usage:\n%s", len(flags), devUsage)
	}
	// The dev entry runs from its "fibril dev" line to the next command.
	entry := regexp.MustCompile(`(?s)\n  fibril dev .*?\n  fibril `).FindString(help)
	for _, f := range flags {
		if !strings.Contains(entry, "--"+f[1]+" ") && !strings.Contains(entry, "--"+f[1]+"]") {
			t.Errorf("fibril help's dev entry does not mention --%s:\n%s", f[1], entry)
		}
	}
}
