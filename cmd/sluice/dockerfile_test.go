package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case: FROM, COPY, RUN, ...
	args string
}

func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{start, strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// words splits a shell command line on spaces, keeping double-quoted
// strings whole and expanding ${NAME} from vars, which is all the
// Dockerfile's RUN lines use.
func words(t *testing.T, s string, vars map[string]string) []string {
	t.Helper()
	s = regexp.MustCompile(`\$\{(\w+)\}`).ReplaceAllStringFunc(s, func(m string) string {
		name := m[2 : len(m)-1]
		v, ok := vars[name]
		if !ok {
			t.Fatalf("%s is not an ARG of the stage", name)
		}
		return v
	})
	var out []string
	var w strings.Builder
	quoted, inWord := false, false
	for _, c := range s {
		switch {
		case c == '"':
			quoted, inWord = !quoted, true
		case c == ' ' && !quoted:
			if inWord {
				out = append(out, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(c)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quote in %q", s)
	}
	if inWord {
		out = append(out, w.String())
	}
	return out
}

// TestDockerfile checks the image's recipe without Docker: every path it
// copies from the source tree exists, its go build command works with the
// same flags (the binary it makes reports the version the ldflags set),
// HEALTHCHECK, ENTRYPOINT and CMD are exec form (the image has no
// shell) and name files the image has, and the ACME volume's directory is
// the image user's.
func TestDockerfile(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ins := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	vars := map[string]string{}
	image := map[string]bool{} // paths of the final image
	owned := map[string]bool{} // paths of the final image given an owner
	var builds, healthchecks int
	var entrypoint, cmd []string
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			// The golang image builds with its own release only
			// (GOTOOLCHAIN=local): one older than go.mod's go line
			// fails at go mod download.
			if tag, ok := strings.CutPrefix(in.args, "golang:"); ok {
				release, _, _ := strings.Cut(tag, "-")
				if want := goModRelease(t, root); release != want {
					t.Errorf("Dockerfile:%d: builds with Go %s; go.mod names go %s", in.line, release, want)
				}
			}
			vars = map[string]string{}
			image = map[string]bool{}
			owned = map[string]bool{}
		case "ARG":
			name, def, _ := strings.Cut(in.args, "=")
			vars[name] = def
		case "COPY":
			f := strings.Fields(in.args)
			from := slices.IndexFunc(f, func(s string) bool { return strings.HasPrefix(s, "--from=") }) >= 0
			chown := slices.IndexFunc(f, func(s string) bool { return strings.HasPrefix(s, "--chown=") }) >= 0
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--") })
			if len(f) < 2 {
				t.Fatalf("Dockerfile:%d: COPY needs a source and a destination", in.line)
			}
			dst := f[len(f)-1]
			for _, src := range f[:len(f)-1] {
				if !from {
					if _, err := os.Stat(filepath.Join(root, src)); err != nil {
						t.Errorf("Dockerfile:%d: COPY %s: %v", in.line, src, err)
					}
				}
				path := dst
				if strings.HasSuffix(dst, "/") {
					path = dst + filepath.Base(src)
				}
				image[path] = true
				owned[path] = owned[path] || chown
			}
		case "RUN":
			w := words(t, in.args, vars)
			var env []string
			for len(w) > 0 && strings.Contains(w[0], "=") && !strings.HasPrefix(w[0], "-") {
				env = append(env, w[0])
				w = w[1:]
			}
			if len(w) < 2 || w[0] != "go" || w[1] != "build" {
				continue
			}
			builds++
			o := slices.Index(w, "-o")
			if o < 0 || o+1 >= len(w) {
				t.Fatalf("Dockerfile:%d: go build without -o", in.line)
			}
			bin := filepath.Join(t.TempDir(), "sluice")
			w[o+1] = bin
			c := exec.Command(w[0], w[1:]...)
			c.Dir = root
			c.Env = append(os.Environ(), env...)
			if out, err := c.CombinedOutput(); err != nil {
				t.Fatalf("Dockerfile:%d: %s: %v\n%s", in.line, strings.Join(w, " "), err, out)
			}
			out, err := exec.Command(bin, "version").CombinedOutput()
			if want := "sluice " + vars["VERSION"] + " "; err != nil || !strings.HasPrefix(string(out), want) {
				t.Errorf("Dockerfile:%d: the built binary's version: got %q, %v; want it to start %q", in.line, out, err, want)
			}
		case "HEALTHCHECK":
			healthchecks++
			_, exe, ok := strings.Cut(in.args, "CMD ")
			var argv []string
			if !ok || json.Unmarshal([]byte(exe), &argv) != nil {
				t.Fatalf("Dockerfile:%d: HEALTHCHECK must run CMD in exec form (a JSON array): the image has no shell", in.line)
			}
			if len(argv) < 2 || !image[argv[0]] || argv[1] != "health" {
				t.Errorf("Dockerfile:%d: HEALTHCHECK runs %q, want the image's sluice with the health command", in.line, argv)
			}
			checkConfigArg(t, in.line, argv, image)
		case "ENTRYPOINT", "CMD":
			var argv []string
			if json.Unmarshal([]byte(in.args), &argv) != nil {
				t.Fatalf("Dockerfile:%d: %s must be exec form (a JSON array): the image has no shell", in.line, in.cmd)
			}
			if in.cmd == "ENTRYPOINT" {
				entrypoint = argv
			} else {
				cmd = argv
			}
		}
	}
	if builds != 1 || healthchecks != 1 {
		t.Errorf("got %d go build commands and %d HEALTHCHECKs, want one each", builds, healthchecks)
	}
	if len(entrypoint) == 0 || !image[entrypoint[0]] {
		t.Errorf("ENTRYPOINT %q: want a binary the image has", entrypoint)
	}
	checkConfigArg(t, 0, append(slices.Clone(entrypoint), cmd...), image)
	// A named volume mounted on a directory the image lacks is created
	// owned by root, where the non-root user cannot keep ACME state.
	if !owned[acmeVolume] {
		t.Errorf("the image has no %s owned by its user, for the ACME volume README names", acmeVolume)
	}
}

// goModRelease is the Go release the go line of root's go.mod names.
func goModRelease(t *testing.T, root string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	return string(m[1])
}

// acmeVolume is where README tells to mount a volume for tls.acme.storage.
const acmeVolume = "/var/lib/sluice"

// checkConfigArg checks that a -config argument names a file of the image.
func checkConfigArg(t *testing.T, line int, argv []string, image map[string]bool) {
	t.Helper()
	if i := slices.Index(argv, "-config"); i >= 0 && (i+1 >= len(argv) || !image[argv[i+1]]) {
		t.Errorf("Dockerfile:%d: %q: -config names no file the image has", line, argv)
	}
}

// TestDockerignore keeps the build context to what a clean clone holds:
// whatever git ignores (local binaries, bench outputs, ACME keys under
// data/ and tmp/) is ignored by the image's build too, and no file git
// tracks is, since the build needs them all.
func TestDockerignore(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	patterns := ignoreLines(t, filepath.Join(root, ".dockerignore"))
	for _, g := range ignoreLines(t, filepath.Join(root, ".gitignore")) {
		// A path git ignores by this pattern, at the root, or deeper
		// for a pattern not anchored there.
		sample := strings.TrimPrefix(g, "/")
		if strings.HasSuffix(sample, "/") {
			sample += "f"
		}
		if !strings.HasPrefix(g, "/") {
			sample = "cmd/sluice/" + strings.ReplaceAll(sample, "*", "x")
		}
		if !dockerIgnored(patterns, sample) {
			t.Errorf(".gitignore has %s; .dockerignore lets %s into the build", g, sample)
		}
	}
	out, err := exec.Command("git", "-C", root, "ls-files").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout?)", err)
	}
	for _, f := range strings.Fields(string(out)) {
		if dockerIgnored(patterns, f) {
			t.Errorf(".dockerignore leaves out %s, which git tracks", f)
		}
	}
}

// ignoreLines are the patterns of an ignore file, without comments and
// blank lines. It refuses ! exceptions, which dockerIgnored does not
// understand.
func ignoreLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			if strings.HasPrefix(l, "!") {
				t.Fatalf("%s: exception %s: not understood by this test", path, l)
			}
			out = append(out, l)
		}
	}
	return out
}

// dockerIgnored reports whether Docker's build leaves out file, a slash
// path from the context's root: a pattern matches the path or one of its
// parent directories, from the root (Go's path.Match) or, after a
// leading **/, at any depth.
func dockerIgnored(patterns []string, file string) bool {
	parts := strings.Split(file, "/")
	for _, p := range patterns {
		p = strings.TrimPrefix(path.Clean(p), "/")
		deep := false
		if rest, ok := strings.CutPrefix(p, "**/"); ok {
			p, deep = rest, true
		}
		for end := 1; end <= len(parts); end++ {
			for start := 0; start < end && (start == 0 || deep); start++ {
				if ok, _ := path.Match(p, strings.Join(parts[start:end], "/")); ok {
					return true
				}
			}
		}
	}
	return false
}
