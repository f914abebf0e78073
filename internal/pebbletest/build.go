package pebbletest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// BinaryEnv names an environment variable that, when set, points at a
// prebuilt pebble binary; the harness then skips building one.
const BinaryEnv = "SLUICE_PEBBLE_BIN"

const pebbleModule = "github.com/letsencrypt/pebble/v2"

// module describes the pebble module as the go command resolves it for the
// sluice module: where its files are and which version it is.
type module struct {
	Dir     string
	Version string
}

var (
	setupOnce sync.Once
	setupMod  module
	setupBin  string
	setupErr  error
)

// setup finds the pebble module and a pebble binary once per process.
func setup() (module, string, error) {
	setupOnce.Do(func() {
		setupMod, setupErr = findModule()
		if setupErr != nil {
			return
		}
		if bin := os.Getenv(BinaryEnv); bin != "" {
			setupBin = bin
			return
		}
		setupBin, setupErr = buildBinary(setupMod)
	})
	return setupMod, setupBin, setupErr
}

// findModule locates the pebble module, downloading it at the version
// go.mod names when the module cache lacks it (a fresh machine: the module
// is a tool of sluice's, which no package of sluice imports).
func findModule() (module, error) {
	m, err := listModule()
	if err == nil && m.Dir == "" {
		if _, err := goCommand("mod", "download", pebbleModule); err != nil {
			return m, fmt.Errorf("downloading module %s: %w", pebbleModule, err)
		}
		m, err = listModule()
	}
	if err == nil && m.Dir == "" {
		err = fmt.Errorf("locating module %s: not in the module cache after go mod download", pebbleModule)
	}
	return m, err
}

func listModule() (module, error) {
	var m module
	out, err := goCommand("list", "-m", "-json", pebbleModule)
	if err != nil {
		return m, fmt.Errorf("locating module %s: %w", pebbleModule, err)
	}
	if err := json.Unmarshal(out, &m); err != nil {
		return m, fmt.Errorf("decoding go list output for %s: %w", pebbleModule, err)
	}
	return m, nil
}

// buildBinary builds pebble into a directory under os.TempDir named after
// the module version and platform, so that the test processes of several
// packages share one binary. A concurrent build by another process is
// harmless: each builds into its own file and renames it into place.
func buildBinary(m module) (string, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("sluice-pebble-%s-%s-%s", m.Version, runtime.GOOS, runtime.GOARCH))
	bin := filepath.Join(dir, "pebble")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating pebble build directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "pebble-*.tmp")
	if err != nil {
		return "", fmt.Errorf("creating pebble build output: %w", err)
	}
	tmpName := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpName)
	if _, err := goCommand("build", "-o", tmpName, pebbleModule+"/cmd/pebble"); err != nil {
		return "", fmt.Errorf("building pebble: %w", err)
	}
	if err := os.Rename(tmpName, bin); err != nil {
		return "", fmt.Errorf("installing pebble binary: %w", err)
	}
	return bin, nil
}

// goCommand runs the go command in the current directory, which for a test
// is its package directory inside the sluice module.
func goCommand(args ...string) ([]byte, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go") // go test puts it on PATH; this is the fallback
	}
	cmd := exec.Command(goBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %v: %w: %s", args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}
