package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// adminStub answers /healthz with code and counts the probes.
func adminStub(t *testing.T, code int) (addr string, hits *int) {
	t.Helper()
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		n++
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), &n
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// closedAddr returns a loopback address that refuses connections.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestHealth(t *testing.T) {
	t.Parallel()
	ok, okHits := adminStub(t, http.StatusOK)
	down, _ := adminStub(t, http.StatusServiceUnavailable)
	_, okPort, _ := net.SplitHostPort(ok)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string // substring of the one stderr line; "" wants no output
	}{
		{"admin flag, 200", []string{"-admin", ok}, 0, ""},
		{"admin flag, 503", []string{"-admin", down}, 1, "503 Service Unavailable"},
		{"admin flag, refused", []string{"-admin", closedAddr(t)}, 1, "connection refused"},
		{"admin on every interface probes loopback", []string{"-admin", ":" + okPort}, 0, ""},
		{"config's admin, 200", []string{"-config", writeConfig(t, fmt.Sprintf("admin: %q\nroutes: []\n", ok))}, 0, ""},
		{"config's admin, 503", []string{"-config", writeConfig(t, fmt.Sprintf("admin: %q\nroutes: []\n", down))}, 1, "503"},
		{"config with admin off", []string{"-config", writeConfig(t, "admin: \"\"\nroutes: []\n")}, 1, "admin listener is off"},
		// A gateway serving its last good config is healthy, whatever
		// else a later edit broke in the file.
		{"config invalid elsewhere", []string{"-config", writeConfig(t, fmt.Sprintf("admin: %q\nbogus: 1\nroutes: [{name: x}]\n---\nx: 1\n", ok))}, 0, ""},
		{"config's admin from the environment", []string{"-config", writeConfig(t, "admin: ${SLUICE_HEALTH_TEST_UNSET:-"+ok+"}\nroutes: []\n")}, 0, ""},
		{"admin unset variable", []string{"-config", writeConfig(t, "admin: ${SLUICE_HEALTH_TEST_UNSET}\nroutes: []\n")}, 1, "SLUICE_HEALTH_TEST_UNSET"},
		{"admin not a value", []string{"-config", writeConfig(t, "admin: [a, b]\n")}, 1, "admin: must be a single value"},
		{"bad address", []string{"-config", writeConfig(t, "admin: 1.2.3\nroutes: []\n")}, 1, "1.2.3"},
		{"broken YAML", []string{"-config", writeConfig(t, "admin: [\n")}, 1, "sluice.yaml:"},
		{"missing config", []string{"-config", filepath.Join(t.TempDir(), "none.yaml")}, 1, "none.yaml"},
		{"both flags", []string{"-config", "x.yaml", "-admin", ok}, 1, "not both"},
		{"bad address", []string{"-admin", "nocolon"}, 1, "nocolon"},
		{"unknown flag", []string{"-bogus"}, 1, "bogus"},
		{"argument", []string{"-admin", ok, "extra"}, 1, "extra"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"health"}, tc.args...), &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit status: got %d, want %d (stderr %q)", code, tc.wantCode, stderr.String())
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout: got %q, want nothing", stdout.String())
			}
			got := stderr.String()
			switch {
			case tc.wantErr == "" && got != "":
				t.Errorf("stderr: got %q, want nothing", got)
			case tc.wantErr != "" && (!strings.Contains(got, tc.wantErr) || strings.Count(got, "\n") != 1 || !strings.HasSuffix(got, "\n")):
				t.Errorf("stderr: got %q, want one line containing %q", got, tc.wantErr)
			}
		})
	}
	if *okHits == 0 {
		t.Errorf("the healthy admin listener was never probed")
	}
}
