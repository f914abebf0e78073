package routes

import (
	"fmt"
	"testing"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"1048576", 1 << 20, ""},
		{"1_000", 1000, ""},
		{"10B", 10, ""},
		{"10KB", 10_000, ""},
		{"10 KiB", 10 << 10, ""},
		{"1.5MB", 1_500_000, ""},
		{"10MiB", 10 << 20, ""},
		{"10mib", 10 << 20, ""},
		{"2GB", 2_000_000_000, ""},
		{"3GiB", 3 << 30, ""},
		{"0.5KiB", 512, ""},
		{"8589934591GiB", 8589934591 << 30, ""},
		{"8589934592GiB", 0, `size "8589934592GiB" is too large`},
		{"0.3KiB", 0, `size "0.3KiB" is not a whole number of bytes`},
		{"MiB", 0, `invalid size "MiB" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)`},
		{"1e6", 0, `invalid size "1e6" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)`},
		{"10TB", 0, `invalid size "10TB" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)`},
		{"1/2KB", 0, `invalid size "1/2KB" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)`},
		{".5KB", 0, `invalid size ".5KB" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)`},
		{"010", 10, ""},
		{"1.5kb", 1500, ""},
		// big.Rat reads these as numbers; a size is decimal digits only.
		{"0x10", 0, `invalid size "0x10" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)`},
		{"0X10KB", 0, `invalid size "0X10KB" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)`},
		{"0b11B", 0, `invalid size "0b11B" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)`},
		{"0o17", 0, `invalid size "0o17" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)`},
		{"0x1p4", 0, `invalid size "0x1p4" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)`},
		{"0x1.8KB", 0, `invalid size "0x1.8KB" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)`},
		{"1.KB", 0, `invalid size "1.KB" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)`},
		{"1.2.3", 0, `invalid size "1.2.3" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)`},
		{"+5", 0, `invalid size "+5" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := parseSize(tc.in)
			if fmt.Sprint(err) != fmt.Sprint(errOrNil(tc.err)) || got != tc.want {
				t.Errorf("got %d, %v, want %d, %v", got, err, tc.want, errOrNil(tc.err))
			}
		})
	}
}

func errOrNil(s string) error {
	if s == "" {
		return nil
	}
	return fmt.Errorf("%s", s)
}

func TestMaxBody(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
routes:
  - name: upload
    upstream: http://127.0.0.1:9000
    max_body: 10MiB
  - name: small
    upstream: http://127.0.0.1:9000
    max_body: 512
`, noEnv)
	if got := c.Table.Routes[0].MaxBody; got != 10<<20 {
		t.Errorf("upload: got max_body %d, want %d", got, 10<<20)
	}
	if got := c.Table.Routes[1].MaxBody; got != 512 {
		t.Errorf("small: got max_body %d, want 512", got)
	}
}
