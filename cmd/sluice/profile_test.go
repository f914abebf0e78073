package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestProfileWrittenWhenAsked: with SLUICE_CPU_PROFILE set, the run's CPU
// profile is in the file once stop returns (a gzipped pprof profile, as
// default.pgo must be); without it nothing is written.
func TestProfileWrittenWhenAsked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pgo")
	stop, err := startProfile(func(k string) (string, bool) {
		return path, k == profileEnv
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Fatalf("profile is not gzipped pprof data: % x", b[:min(len(b), 8)])
	}

	stop, err = startProfile(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestProfileFileNotWritable: a profile that cannot be written stops the
// start with an error naming the variable, rather than a run that loses it.
func TestProfileFileNotWritable(t *testing.T) {
	_, err := startProfile(func(string) (string, bool) {
		return filepath.Join(t.TempDir(), "missing", "cpu.pgo"), true
	})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(profileEnv)) {
		t.Fatalf("err = %v, want one naming %s", err, profileEnv)
	}
}
