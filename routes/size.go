package routes

import (
	"fmt"
	"math"
	"math/big"
	"strings"
)

// sizeUnits are the units a size may end in: SI multiples of 1000 and IEC
// multiples of 1024, as their names say. Longer suffixes come first so
// "KiB" is not read as "B".
var sizeUnits = []struct {
	suffix string
	bytes  int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
	{"B", 1},
}

// parseSize reads a byte size: a whole number of bytes, or a number (a
// fraction is allowed, "1.5MB") followed by B, KB, MB, GB, KiB, MiB or GiB,
// optionally after a space. Units are matched without regard to case. The
// result must be a whole number of bytes that fits in an int64.
func parseSize(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range sizeUnits {
		if len(num) > len(u.suffix) && strings.EqualFold(num[len(num)-len(u.suffix):], u.suffix) {
			num, mult = strings.TrimSpace(num[:len(num)-len(u.suffix)]), u.bytes
			break
		}
	}
	num = strings.ReplaceAll(num, "_", "")
	if !decimal(num) {
		return 0, fmt.Errorf("invalid size %q (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)", s)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("invalid size %q (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	switch {
	case !r.IsInt():
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	case r.Num().Cmp(big.NewInt(math.MaxInt64)) > 0:
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return r.Num().Int64(), nil
}

// size decodes a byte size that must be > 0.
func (d *decoder) size(m map[string]entry, name, path string) val[int64] {
	e := m[name]
	p := field(path, name)
	s, ok := d.text(e.val, p)
	if !ok {
		return val[int64]{}
	}
	n, err := parseSize(s)
	if err != nil {
		d.errorf(e.val, p, "%v", err)
		return val[int64]{}
	}
	if n <= 0 {
		d.errorf(e.val, p, "must be > 0 (leave it out for no limit)")
		return val[int64]{}
	}
	return val[int64]{n, true, e.val}
}

// decimal reports whether s is digits, optionally with a fraction: big.Rat
// would also take a sign, an exponent, a fraction a/b and the base
// prefixes 0x, 0o and 0b, none of which a size is written with.
func decimal(s string) bool {
	whole, frac, hasFrac := strings.Cut(s, ".")
	return allDigits(whole) && (!hasFrac || allDigits(frac))
}
