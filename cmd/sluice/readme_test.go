package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEFlags keeps README naming every flag each command's -h
// prints, and each exit status of a flag it does not know.
func TestREADMEFlags(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	flagLine := regexp.MustCompile(`(?m)^\s+(-[a-z][a-z-]*)\b`)
	for _, cmd := range []string{"run", "validate", "demo", "health", "simulate"} {
		var out, errOut bytes.Buffer
		run([]string{cmd, "-h"}, &out, &errOut)
		flags := flagLine.FindAllStringSubmatch(out.String()+errOut.String(), -1)
		if len(flags) == 0 {
			t.Errorf("sluice %s -h: found no flags in %q", cmd, out.String()+errOut.String())
		}
		for _, f := range flags {
			if name := f[1]; !bytes.Contains(readme, []byte("`"+name)) && !bytes.Contains(readme, []byte(" "+name+" ")) {
				t.Errorf("sluice %s has flag %s; README never names it", cmd, name)
			}
		}
	}
	// README: "a flag it does not know is a usage error (exit 2;
	// validate and health exit 1)".
	if !strings.Contains(strings.Join(strings.Fields(string(readme)), " "), "a flag it does not know is a usage error (exit 2; `validate` and `health` exit 1)") {
		t.Fatal("README no longer says how a flag a command does not know exits")
	}
	for cmd, want := range map[string]int{"run": 2, "validate": 1, "demo": 2, "health": 1, "simulate": 2, "version": 2} {
		var out, errOut bytes.Buffer
		if code := run([]string{cmd, "-no-such-flag"}, &out, &errOut); code != want {
			t.Errorf("sluice %s -no-such-flag: exit %d, README says %d", cmd, code, want)
		}
	}
}

// TestREADMEValidateOK keeps README's word on what validate prints for a
// valid file.
func TestREADMEValidateOK(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, example, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", "-config", path}, &out, &errOut); code != 0 {
		t.Fatalf("validate: exit %d, stderr %q", code, errOut.String())
	}
	shown := strings.TrimSuffix(strings.Replace(out.String(), path, "sluice.yaml", 1), "\n")
	if errOut.Len() != 0 || !bytes.Contains(readme, []byte("A valid file prints `"+shown+"` on stdout and exits 0.")) {
		t.Errorf("validate printed %q on stdout and %q on stderr; README says another thing", out.String(), errOut.String())
	}
}
