package routes

import (
	"errors"
	"fmt"
	"strings"
)

// expand replaces ${NAME} and ${NAME:-default} in s with values from env.
// As in the shell, the default also applies when NAME is set but empty.
// "$${" writes a literal "${"; any other '$' is kept as it is. Defaults are
// not expanded again. Every unset variable of s is named, joined with
// errors.Join, so that one run of validate lists them all.
func expand(s string, env func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	var unset []error
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			break
		}
		if i > 0 && s[i-1] == '$' {
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return "", errors.Join(append(unset, fmt.Errorf("unterminated ${ in %q", s[i:]))...)
		}
		inner := s[i+2 : i+j]
		s = s[i+j+1:]
		name, def, hasDef := strings.Cut(inner, ":-")
		if strings.Contains(def, "${") {
			// "${A:-${B}}" would end at the first "}" and leave the
			// second in the value: "secret}" for a password.
			return "", errors.Join(append(unset, fmt.Errorf("nested ${ in the default of %s is not supported", name))...)
		}
		if !validEnvName(name) {
			return "", errors.Join(append(unset, fmt.Errorf("invalid environment variable name %q", name))...)
		}
		v, ok := "", false
		if env != nil {
			v, ok = env(name)
		}
		switch {
		case hasDef && v == "":
			v = def
		case !ok:
			unset = append(unset, fmt.Errorf("environment variable %s is not set", name))
		}
		b.WriteString(v)
	}
	if len(unset) > 0 {
		return "", errors.Join(unset...)
	}
	return b.String(), nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return true
}
