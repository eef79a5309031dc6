package quantity

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in     string
		canon  string
		value  int64
		milli  int64
		format Format
	}{
		{"0", "0", 0, 0, DecimalSI},
		{"1", "1", 1, 1000, DecimalSI},
		{"+1", "1", 1, 1000, DecimalSI},
		{"1000", "1k", 1000, 1000000, DecimalSI},
		{"1500", "1500", 1500, 1500000, DecimalSI},
		{"0.5", "500m", 1, 500, DecimalSI},
		{".5", "500m", 1, 500, DecimalSI},
		{"5.", "5", 5, 5000, DecimalSI},
		{"100m", "100m", 1, 100, DecimalSI},
		{"1000m", "1", 1, 1000, DecimalSI},
		{"1500m", "1500m", 2, 1500, DecimalSI},
		{"0.1m", "100u", 1, 1, DecimalSI},
		{"1n", "1n", 1, 1, DecimalSI},
		{"1u", "1u", 1, 1, DecimalSI},
		{"1k", "1k", 1000, 1000000, DecimalSI},
		{"1M", "1M", 1000000, 1000000000, DecimalSI},
		{"2G", "2G", 2000000000, 2000000000000, DecimalSI},
		{"1T", "1T", 1e12, 1e15, DecimalSI},
		{"1P", "1P", 1e15, 1e18, DecimalSI},
		{"1E", "1E", 1e18, math.MaxInt64, DecimalSI},
		{"1.5k", "1500", 1500, 1500000, DecimalSI},
		{"1Ki", "1Ki", 1024, 1024000, BinarySI},
		{"1.5Gi", "1536Mi", 1610612736, 1610612736000, BinarySI},
		{"128Mi", "128Mi", 134217728, 134217728000, BinarySI},
		{"1024Mi", "1Gi", 1 << 30, 1 << 30 * 1000, BinarySI},
		{"0.5Ki", "512", 512, 512000, BinarySI},
		{"0.1Ki", "102400m", 103, 102400, BinarySI},
		{"1Ti", "1Ti", 1 << 40, 1 << 40 * 1000, BinarySI},
		{"1Pi", "1Pi", 1 << 50, 1 << 50 * 1000, BinarySI},
		{"1Ei", "1Ei", 1 << 60, math.MaxInt64, BinarySI},
		{"1e3", "1e3", 1000, 1000000, DecimalExponent},
		{"1E3", "1e3", 1000, 1000000, DecimalExponent},
		{"1e+3", "1e3", 1000, 1000000, DecimalExponent},
		{"15e-1", "1500e-3", 2, 1500, DecimalExponent},
		{"1500e0", "1500", 1500, 1500000, DecimalExponent},
		{"1e-9", "1e-9", 1, 1, DecimalExponent},
		{"1e-10", "1e-9", 1, 1, DecimalExponent}, // below 1n rounds up
		{"-1", "-1", -1, -1000, DecimalSI},
		{"-1.5", "-1500m", -1, -1500, DecimalSI},
		{"-0.0001m", "-100n", 0, 0, DecimalSI},
		{"-0", "0", 0, 0, DecimalSI},
		{"0.000000000000000000001", "1n", 1, 1, DecimalSI},
		{"00012", "12", 12, 12000, DecimalSI},
		{"9223372036854775807", "9223372036854775807", math.MaxInt64, math.MaxInt64, DecimalSI},
		{"0e99999", "0", 0, 0, DecimalExponent},
	}
	for _, c := range cases {
		q, err := Parse(c.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if got := q.String(); got != c.canon {
			t.Errorf("Parse(%q).String() = %q, want %q", c.in, got, c.canon)
		}
		if got := q.Value(); got != c.value {
			t.Errorf("Parse(%q).Value() = %d, want %d", c.in, got, c.value)
		}
		if got := q.MilliValue(); got != c.milli {
			t.Errorf("Parse(%q).MilliValue() = %d, want %d", c.in, got, c.milli)
		}
		if q.Format() != c.format {
			t.Errorf("Parse(%q).Format() = %s, want %s", c.in, q.Format(), c.format)
		}
		again, err := Parse(q.String())
		if err != nil || again.Cmp(q) != 0 {
			t.Errorf("Parse(%q) does not round-trip through %q: %v %v", c.in, q.String(), again, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		in   string
		want error
	}{
		{"", ErrEmpty},
		{"abc", ErrFormat},
		{"-", ErrFormat},
		{".", ErrFormat},
		{"m", ErrFormat},
		{"1..5", ErrSuffix},
		{"1.5.", ErrSuffix},
		{" 1", ErrFormat},
		{"1 ", ErrSuffix},
		{"1mi", ErrSuffix},
		{"1KI", ErrSuffix},
		{"1K", ErrSuffix},
		{"1Gb", ErrSuffix},
		{"1e", ErrSuffix},
		{"1e+", ErrSuffix},
		{"1e+-3", ErrSuffix},
		{"1e3.5", ErrSuffix},
		{"1ee3", ErrSuffix},
		{"--1", ErrFormat},
		{"1e29", ErrTooLarge},
		{"10E", ErrTooLarge},
		{"8Ei", ErrTooLarge},
		{"9223372036854775808", ErrTooLarge},
		{"1e99999999999999999999", ErrTooLarge},
		{"1" + strings.Repeat("0", 40), ErrTooLarge},
	}
	for _, c := range cases {
		q, err := Parse(c.in)
		if !errors.Is(err, c.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.in, q, err, c.want)
		}
		if err != nil && c.in != "" && !strings.Contains(err.Error(), `"`+c.in+`"`) {
			t.Errorf("Parse(%q) error %q does not name the input", c.in, err)
		}
	}
}

func TestParseNonNegative(t *testing.T) {
	if _, err := ParseNonNegative("-1m"); !errors.Is(err, ErrNegative) {
		t.Errorf("ParseNonNegative(-1m) = %v", err)
	}
	if _, err := ParseNonNegative("x"); !errors.Is(err, ErrFormat) {
		t.Errorf("ParseNonNegative(x) = %v", err)
	}
	if q, err := ParseNonNegative("0"); err != nil || !q.IsZero() {
		t.Errorf("ParseNonNegative(0) = %v, %v", q, err)
	}
	if q, err := ParseNonNegative("-0"); err != nil || !q.IsZero() {
		t.Errorf("ParseNonNegative(-0) = %v, %v", q, err)
	}
}

func TestArithmetic(t *testing.T) {
	a, b := MustParse("1500m"), MustParse("500m")
	if got := a.Add(b); got.String() != "2" || got.MilliValue() != 2000 {
		t.Errorf("1500m+500m = %s", got)
	}
	if got := a.Sub(b); got.String() != "1" {
		t.Errorf("1500m-500m = %s", got)
	}
	if got := b.Sub(a); got.String() != "-1" || got.Sign() != -1 {
		t.Errorf("500m-1500m = %s", got)
	}
	// Add and Sub do not modify their operands.
	if a.String() != "1500m" || b.String() != "500m" {
		t.Errorf("operands changed: %s %s", a, b)
	}
	if a.Cmp(b) != 1 || b.Cmp(a) != -1 || a.Cmp(MustParse("1.5")) != 0 {
		t.Error("Cmp")
	}
	// The zero value is 0 and takes the other operand's format.
	var zero Quantity
	if !zero.IsZero() || zero.String() != "0" || zero.Value() != 0 {
		t.Error("zero value")
	}
	if got := zero.Add(MustParse("1Gi")); got.String() != "1Gi" {
		t.Errorf("0+1Gi = %s", got)
	}
	if got := MustParse("1Gi").Add(MustParse("512Mi")); got.String() != "1536Mi" {
		t.Errorf("1Gi+512Mi = %s", got)
	}
	if got := MustParse("1Gi").Add(MustParse("1")); got.String() != "1073741825" {
		t.Errorf("1Gi+1 = %s", got)
	}
	// Summing millicores stays exact (no float drift).
	sum := Quantity{}
	for i := 0; i < 1000; i++ {
		sum = sum.Add(MustParse("0.1"))
	}
	if sum.MilliValue() != 100000 || sum.String() != "100" {
		t.Errorf("1000 × 0.1 = %s", sum)
	}
	if got := NewQuantity(3, BinarySI); got.String() != "3" || got.Value() != 3 {
		t.Errorf("NewQuantity = %s", got)
	}
	if got := NewMilliQuantity(250, DecimalSI); got.String() != "250m" {
		t.Errorf("NewMilliQuantity = %s", got)
	}
	if got := MustParse("5").Neg(); got.String() != "-5" {
		t.Errorf("Neg = %s", got)
	}
	// Value and MilliValue round up (towards +∞) and saturate.
	if got := MustParse("1n").MilliValue(); got != 1 {
		t.Errorf("1n milli = %d", got)
	}
	if got := MustParse("-1n").MilliValue(); got != 0 {
		t.Errorf("-1n milli = %d", got)
	}
	big := MustParse("9223372036854775807")
	if got := big.Add(big).Value(); got != math.MaxInt64 {
		t.Errorf("saturation: %d", got)
	}
	if got := big.Neg().Sub(big).Value(); got != math.MinInt64 {
		t.Errorf("negative saturation: %d", got)
	}
}

func TestIsWholeAndReason(t *testing.T) {
	for s, want := range map[string]bool{"1": true, "1500m": false, "2k": true, "1Ki": true, "0.5Ki": true, "0.1Ki": false, "1E": true, "-3": true, "1n": false} {
		if got := MustParse(s).IsWhole(); got != want {
			t.Errorf("%s.IsWhole() = %v", s, got)
		}
	}
	_, err := Parse("1GB")
	if r := Reason(err); r != ErrSuffix || r.Error() != "unable to parse quantity's suffix" {
		t.Errorf("Reason = %v", r)
	}
	_, err = ParseNonNegative("-1")
	if Reason(err) != ErrNegative {
		t.Errorf("Reason = %v", Reason(err))
	}
	other := errors.New("other")
	if Reason(other) != other {
		t.Error("Reason of a foreign error")
	}
}

func TestMustParsePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("MustParse(bad) did not panic")
		}
	}()
	MustParse("bad")
}

// FuzzParse checks that Parse never panics, that the canonical form parses
// back to the same value and is stable, and that Value/MilliValue agree.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "1", "100m", "1.5Gi", "1e3", "1E-3", "-2k", ".5", "5.", "1e99", "0.1Ki", "12345678901234567890n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := Parse(s)
		if err != nil {
			return
		}
		canon := q.String()
		again, err := Parse(canon)
		if err != nil {
			t.Fatalf("Parse(%q) ok, String %q fails: %v", s, canon, err)
		}
		if again.Cmp(q) != 0 {
			t.Fatalf("Parse(%q) = %s, reparsed %s differs", s, canon, again)
		}
		if again.String() != canon {
			t.Fatalf("canonical form not stable: %q -> %q -> %q", s, canon, again.String())
		}
		if v, m := q.Value(), q.MilliValue(); m != math.MaxInt64 && m != math.MinInt64 && (m > v*1000 || m <= (v-1)*1000) {
			t.Fatalf("Parse(%q): Value %d and MilliValue %d disagree", s, v, m)
		}
	})
}

// TestInlineAgreesWithBig checks the inline int64 fast paths against the
// big.Int arithmetic they stand in for: random quantities, valid and not,
// parse to the same value, format and error either way, and every
// operation on values near the int64 edges gives what big.Int gives.
func TestInlineAgreesWithBig(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	suffixes := []string{"", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "E-2", "x", "Mii"}
	inline := 0
	for range 20000 {
		var sb strings.Builder
		switch rng.IntN(4) {
		case 0:
			sb.WriteByte('-')
		case 1:
			sb.WriteByte('+')
		}
		digits := 1 + rng.IntN(21)
		dot := rng.IntN(digits + 3) // often no dot
		for i := range digits {
			if i == dot {
				sb.WriteByte('.')
			}
			sb.WriteByte(byte('0' + rng.IntN(10)))
		}
		sb.WriteString(suffixes[rng.IntN(len(suffixes))])
		s := sb.String()

		got, gotErr := Parse(s)
		want, wantErr := parseSignedBig(s)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("Parse(%q) error %v, big.Int parse %v", s, gotErr, wantErr)
		}
		if gotErr != nil {
			continue
		}
		if got.n().Cmp(want.n()) != 0 || got.Format() != want.Format() {
			t.Fatalf("Parse(%q) = %s %s, big.Int parse %s %s", s, got.n(), got.Format(), want.n(), want.Format())
		}
		if (got.nanos == nil) != got.n().IsInt64() {
			t.Fatalf("Parse(%q): inline %v for a value that fits an int64: %v", s, got.nanos == nil, got.n().IsInt64())
		}
		if got.nanos == nil {
			inline++
		}
	}
	if inline < 5000 {
		t.Fatalf("only %d of 20000 parsed inline: the fast path is not exercised", inline)
	}

	edges := []int64{0, 1, -1, 999_999_999, 1e9, -1e9, 1e9 + 1, math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, math.MinInt64 + 1, math.MaxInt64 / 2, math.MinInt64 / 2}
	for range 2000 {
		edges = append(edges, rng.Int64()>>rng.IntN(63)*int64(1-2*rng.IntN(2)))
	}
	bigOf := func(v int64) Quantity { return Quantity{nanos: big.NewInt(v)} } // the same value held as a big.Int
	for i, a := range edges {
		b := edges[(i*7+3)%len(edges)]
		qa, qb := Quantity{small: a}, Quantity{small: b}
		ba, bb := bigOf(a), bigOf(b)
		check := func(op string, got, want Quantity) {
			t.Helper()
			if got.n().Cmp(want.n()) != 0 || (got.nanos == nil) != got.n().IsInt64() {
				t.Fatalf("%d %s %d: inline %s (inline %v), big.Int %s", a, op, b, got.n(), got.nanos == nil, want.n())
			}
		}
		check("+", qa.Add(qb), ba.Add(bb))
		check("-", qa.Sub(qb), ba.Sub(bb))
		check("neg", qa.Neg(), ba.Neg())
		if qa.Cmp(qb) != ba.Cmp(bb) || qa.Sign() != ba.Sign() || qa.IsWhole() != ba.IsWhole() ||
			qa.Value() != ba.Value() || qa.MilliValue() != ba.MilliValue() || qa.String() != ba.String() {
			t.Fatalf("%d vs %d: Cmp, Sign, IsWhole, Value, MilliValue or String differ between inline and big.Int", a, b)
		}
	}
	for _, v := range []int64{0, 1, -1, 9_223_372_036, 9_223_372_037, -9_223_372_037, math.MaxInt64, math.MinInt64} {
		if got, want := NewQuantity(v, DecimalSI), of(new(big.Int).Mul(big.NewInt(v), bigNano), DecimalSI); got.n().Cmp(want.n()) != 0 || (got.nanos == nil) != want.n().IsInt64() {
			t.Fatalf("NewQuantity(%d) = %s, want %s", v, got.n(), want.n())
		}
		if got, want := NewMilliQuantity(v, DecimalSI), of(new(big.Int).Mul(big.NewInt(v), bigMilli), DecimalSI); got.n().Cmp(want.n()) != 0 || (got.nanos == nil) != want.n().IsInt64() {
			t.Fatalf("NewMilliQuantity(%d) = %s, want %s", v, got.n(), want.n())
		}
	}
}

// parseSignedBig is Parse with the big.Int parser alone.
func parseSignedBig(s string) (Quantity, error) {
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	q, err := parseBig(s)
	if err != nil || !neg {
		return q, err
	}
	return of(new(big.Int).Neg(q.n()), q.format), nil
}

// BenchmarkParseRequests parses a pod's usual requests and limits; they
// are held inline, so it allocates nothing.
func BenchmarkParseRequests(b *testing.B) {
	in := []string{"100m", "64Mi", "500m", "128Mi"}
	b.ReportAllocs()
	for i := range b.N {
		if _, err := Parse(in[i%len(in)]); err != nil {
			b.Fatal(err)
		}
	}
}
