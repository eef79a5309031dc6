// Package quantity parses and computes with Kubernetes resource quantities
// ("100m", "1.5Gi", "1e3", "0.5"): the cpu, memory and storage amounts of
// container resources, node capacity and volume sizes. Values are exact to
// a nano unit (10^-9), so sums kept by the scheduler never drift.
package quantity

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Format records how a quantity was written, so String keeps the notation
// (binary suffixes stay binary).
type Format string

// The three notations of the quantity syntax.
const (
	// DecimalSI uses decimal suffixes: n, u, m, "", k, M, G, T, P, E.
	DecimalSI Format = "DecimalSI"
	// BinarySI uses power-of-two suffixes: Ki, Mi, Gi, Ti, Pi, Ei.
	BinarySI Format = "BinarySI"
	// DecimalExponent uses an exponent: 1e3, 1E-3.
	DecimalExponent Format = "DecimalExponent"
)

// Errors returned (wrapped, with the input) by Parse.
var (
	ErrEmpty    = errors.New("quantity must not be empty")
	ErrFormat   = errors.New("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
	ErrSuffix   = errors.New("unable to parse quantity's suffix")
	ErrTooLarge = errors.New("quantity is too large")
	ErrNegative = errors.New("must be greater than or equal to 0")
)

// Quantity is a fixed-point number with nano precision. The zero value is
// 0. Quantities are immutable: Add and Sub return new values.
//
// A value whose nanos fit an int64 (up to about 9.2·10^9 units: any cpu
// amount, memory up to 8 Gi) is held inline, so parsing, comparing and
// summing it allocates nothing; only larger values use a big.Int. Every
// pod created parses its requests and limits, and the scheduler sums them.
type Quantity struct {
	small  int64    // the value in nanos when nanos is nil
	nanos  *big.Int // the value when it does not fit small; never mutated once set
	format Format
}

// of returns v (nanos) in format f, inline when it fits.
func of(v *big.Int, f Format) Quantity {
	if v.IsInt64() {
		return Quantity{small: v.Int64(), format: f}
	}
	return Quantity{nanos: v, format: f}
}

var (
	bigNano  = big.NewInt(1e9)
	bigMilli = big.NewInt(1e6)
	// maxNanos bounds a quantity so that Value fits an int64.
	maxNanos = new(big.Int).Mul(big.NewInt(math.MaxInt64), bigNano)
)

// decimalSuffixes maps a suffix to its power of ten.
var decimalSuffixes = map[string]int{
	"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}

// binarySuffixes maps a suffix to its power of two.
var binarySuffixes = map[string]uint{
	"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60,
}

// Parse parses a quantity: an optionally signed decimal number ("5", "0.5",
// ".5") followed by nothing, a decimal SI suffix, a binary SI suffix or a
// decimal exponent ("e3", "E-3"). Digits finer than 1n are rounded away
// from zero.
func Parse(s string) (Quantity, error) {
	if s == "" {
		return Quantity{}, ErrEmpty
	}
	q, err := parse(s)
	if err != nil {
		return Quantity{}, fmt.Errorf("quantity %q: %w", s, err)
	}
	return q, nil
}

// ParseNonNegative is Parse that also rejects negative quantities, for
// requests, limits and capacities.
func ParseNonNegative(s string) (Quantity, error) {
	q, err := Parse(s)
	if err != nil {
		return Quantity{}, err
	}
	if q.Sign() < 0 {
		return Quantity{}, fmt.Errorf("quantity %q: %w", s, ErrNegative)
	}
	return q, nil
}

// MustParse is Parse for literals known to be valid; it panics otherwise.
func MustParse(s string) Quantity {
	q, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return q
}

func parse(s string) (Quantity, error) {
	neg := false
	switch s[0] {
	case '-':
		neg = true
		s = s[1:]
	case '+':
		s = s[1:]
	}
	q, ok := parseSmall(s)
	if !ok {
		var err error
		if q, err = parseBig(s); err != nil {
			return Quantity{}, err
		}
	}
	if neg {
		q = q.Neg()
	}
	return q, nil
}

// parseSmall parses the common case of an unsigned quantity without
// allocating: a plain decimal number of at most 18 digits with a decimal
// or binary suffix, whose value in nanos fits an int64. It declines (ok
// false) everything else, valid or not, for parseBig to decide.
func parseSmall(s string) (q Quantity, ok bool) {
	var mant uint64
	i, digits, frac, dot := 0, 0, 0, false
	for ; i < len(s); i++ {
		c := s[i]
		if c == '.' && !dot {
			dot = true
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		if digits == 18 {
			return Quantity{}, false
		}
		mant = mant*10 + uint64(c-'0')
		digits++
		if dot {
			frac++
		}
	}
	if digits == 0 {
		return Quantity{}, false
	}
	var format Format
	var exp10 int
	var exp2 uint
	if e, found := decimalSuffixes[s[i:]]; found {
		format, exp10 = DecimalSI, e
	} else if e, found := binarySuffixes[s[i:]]; found {
		format, exp2 = BinarySI, e
	} else {
		return Quantity{}, false
	}
	// mant < 10^18, and 2^60 is the largest binary factor: check before
	// each multiplication that the product stays under 2^63.
	if exp2 > 0 {
		if mant > math.MaxInt64>>exp2 {
			return Quantity{}, false
		}
		mant <<= exp2
	}
	exp := exp10 - frac + 9
	for ; exp > 0; exp-- {
		if mant > math.MaxInt64/10 {
			return Quantity{}, false
		}
		mant *= 10
	}
	if exp < 0 {
		if exp < -18 {
			return Quantity{}, false
		}
		p := uint64(pow10Small[-exp])
		q, r := mant/p, mant%p
		if r != 0 {
			q++ // digits finer than 1n round away from zero
		}
		mant = q
	}
	return Quantity{small: int64(mant), format: format}, true
}

// pow10Small holds 10^0 to 10^18, the powers an int64 holds.
var pow10Small = func() (t [19]int64) {
	t[0] = 1
	for i := 1; i < len(t); i++ {
		t[i] = t[i-1] * 10
	}
	return t
}()

// parseBig parses any unsigned quantity with big.Int arithmetic.
func parseBig(s string) (Quantity, error) {
	// Number: digits with at most one '.', at least one digit.
	i, dot, digits := 0, -1, 0
	for ; i < len(s); i++ {
		c := s[i]
		if c == '.' && dot < 0 {
			dot = i
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		digits++
	}
	if digits == 0 {
		return Quantity{}, ErrFormat
	}
	num, suffix := s[:i], s[i:]
	frac := 0
	if dot >= 0 {
		frac = len(num) - dot - 1
		num = num[:dot] + num[dot+1:]
	}
	num = strings.TrimLeft(num, "0")
	mant := new(big.Int)
	if num != "" {
		mant.SetString(num, 10)
	}

	format, exp10, exp2, err := parseSuffix(suffix)
	if err != nil {
		return Quantity{}, err
	}
	nanos, err := scale(mant, len(num), exp10-frac+9, exp2)
	if err != nil {
		return Quantity{}, err
	}
	return of(nanos, format), nil
}

// parseSuffix returns the notation and the scale a suffix stands for.
func parseSuffix(suffix string) (f Format, exp10 int, exp2 uint, err error) {
	if e, ok := decimalSuffixes[suffix]; ok {
		return DecimalSI, e, 0, nil
	}
	if e, ok := binarySuffixes[suffix]; ok {
		return BinarySI, 0, e, nil
	}
	if len(suffix) < 2 || (suffix[0] != 'e' && suffix[0] != 'E') {
		return "", 0, 0, ErrSuffix
	}
	exp := suffix[1:]
	body := strings.TrimLeft(exp, "+-")
	if body == "" || len(exp)-len(body) > 1 || strings.Trim(body, "0123456789") != "" {
		return "", 0, 0, ErrSuffix
	}
	n, err := strconv.Atoi(exp)
	if err != nil || n > 1_000_000 || n < -1_000_000 {
		// Far outside any usable range; reject rather than compute with it.
		return "", 0, 0, ErrTooLarge
	}
	return DecimalExponent, n, 0, nil
}

// scale returns mant·2^exp2·10^exp10 in nanos, rounding away from zero,
// or ErrTooLarge. ndigits is the number of decimal digits of mant; it
// bounds the work done for absurd exponents.
func scale(mant *big.Int, ndigits, exp10 int, exp2 uint) (*big.Int, error) {
	if mant.Sign() == 0 {
		return new(big.Int), nil
	}
	// mant ≥ 1, so 10^exp10 beyond 10^28 already exceeds maxNanos (≈9.2·10^27).
	if exp10 > 28 {
		return nil, ErrTooLarge
	}
	v := new(big.Int).Lsh(mant, exp2)
	if exp10 >= 0 {
		v.Mul(v, pow10(exp10))
	} else {
		// Dividing by more than 10^(digits+19) leaves less than one nano;
		// the result is then 1 whatever the exact exponent.
		d := -exp10
		if limit := ndigits + 20; d > limit {
			d = limit
		}
		var rem big.Int
		v.QuoRem(v, pow10(d), &rem)
		if rem.Sign() != 0 {
			v.Add(v, big.NewInt(1))
		}
	}
	if v.Cmp(maxNanos) > 0 {
		return nil, ErrTooLarge
	}
	return v, nil
}

// pow10 is 10^n. Callers only read it: the common powers are shared
// from a table, as every quantity a request holds computes one or two.
func pow10(n int) *big.Int {
	if n < len(powers10) {
		return powers10[n]
	}
	return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil)
}

var powers10 = func() (t [64]*big.Int) {
	t[0] = big.NewInt(1)
	for i := 1; i < len(t); i++ {
		t[i] = new(big.Int).Mul(t[i-1], big.NewInt(10))
	}
	return t
}()

// NewQuantity returns value units in format f.
func NewQuantity(value int64, f Format) Quantity {
	if n, ok := mul64(value, 1e9); ok {
		return Quantity{small: n, format: f}
	}
	return of(new(big.Int).Mul(big.NewInt(value), bigNano), f)
}

// NewMilliQuantity returns milli thousandths of a unit in format f.
func NewMilliQuantity(milli int64, f Format) Quantity {
	if n, ok := mul64(milli, 1e6); ok {
		return Quantity{small: n, format: f}
	}
	return of(new(big.Int).Mul(big.NewInt(milli), bigMilli), f)
}

// mul64 is a·b when it fits an int64.
func mul64(a, b int64) (int64, bool) {
	if a == 0 {
		return 0, true
	}
	p := a * b
	if p/b != a || (a == -1 && b == math.MinInt64) {
		return 0, false
	}
	return p, true
}

// n returns q's nanos as a big.Int, for the arithmetic beyond the inline
// fast paths; callers only read it.
func (q Quantity) n() *big.Int {
	if q.nanos == nil {
		return big.NewInt(q.small)
	}
	return q.nanos
}

// Format returns the notation String uses.
func (q Quantity) Format() Format {
	if q.format == "" {
		return DecimalSI
	}
	return q.format
}

// Sign returns -1, 0 or +1.
func (q Quantity) Sign() int {
	switch {
	case q.nanos != nil:
		return q.nanos.Sign()
	case q.small > 0:
		return 1
	case q.small < 0:
		return -1
	}
	return 0
}

// IsZero reports whether q is 0.
func (q Quantity) IsZero() bool { return q.Sign() == 0 }

// IsWhole reports whether q is a whole number of units (no fraction), as
// device counts of extended resources must be.
func (q Quantity) IsWhole() bool {
	if q.nanos == nil {
		return q.small%1e9 == 0
	}
	var rem big.Int
	return rem.Rem(q.n(), bigNano).Sign() == 0
}

// Reason returns the sentinel error (ErrEmpty, ErrFormat, ...) that err
// from Parse or ParseNonNegative wraps, so callers can show the problem
// without the repeated input; it returns err itself for other errors.
func Reason(err error) error {
	for _, e := range []error{ErrEmpty, ErrFormat, ErrSuffix, ErrTooLarge, ErrNegative} {
		if errors.Is(err, e) {
			return e
		}
	}
	return err
}

// Cmp returns -1, 0 or +1 as q is less than, equal to or greater than o.
func (q Quantity) Cmp(o Quantity) int {
	if q.nanos == nil && o.nanos == nil {
		switch {
		case q.small < o.small:
			return -1
		case q.small > o.small:
			return 1
		}
		return 0
	}
	return q.n().Cmp(o.n())
}

// Add returns q+o in q's notation (o's when q is the zero value).
func (q Quantity) Add(o Quantity) Quantity {
	if q.nanos == nil && o.nanos == nil {
		if sum := q.small + o.small; (sum > q.small) == (o.small > 0) {
			return Quantity{small: sum, format: q.pick(o)}
		}
	}
	return of(new(big.Int).Add(q.n(), o.n()), q.pick(o))
}

// Sub returns q-o in q's notation (o's when q is the zero value).
func (q Quantity) Sub(o Quantity) Quantity {
	if q.nanos == nil && o.nanos == nil {
		if diff := q.small - o.small; (diff < q.small) == (o.small > 0) {
			return Quantity{small: diff, format: q.pick(o)}
		}
	}
	return of(new(big.Int).Sub(q.n(), o.n()), q.pick(o))
}

// Neg returns -q.
func (q Quantity) Neg() Quantity {
	if q.nanos == nil && q.small != math.MinInt64 {
		return Quantity{small: -q.small, format: q.format}
	}
	return of(new(big.Int).Neg(q.n()), q.format)
}

func (q Quantity) pick(o Quantity) Format {
	if q.format == "" {
		return o.format
	}
	return q.format
}

// Value returns q in units, rounded up (towards +∞), saturating at the
// int64 range. Memory and storage are compared in bytes with it.
func (q Quantity) Value() int64 {
	if q.nanos == nil {
		return ceilDiv64(q.small, 1e9)
	}
	return ceilDiv(q.nanos, bigNano)
}

// MilliValue returns q in thousandths, rounded up (towards +∞), saturating
// at the int64 range. CPU is accounted in millicores with it.
func (q Quantity) MilliValue() int64 {
	if q.nanos == nil {
		return ceilDiv64(q.small, 1e6)
	}
	return ceilDiv(q.nanos, bigMilli)
}

// ceilDiv64 is n/d rounded towards +∞, for d > 0.
func ceilDiv64(n, d int64) int64 {
	quo := n / d // truncated: already the ceiling when n < 0
	if n > 0 && n%d != 0 {
		quo++
	}
	return quo
}

func ceilDiv(n, d *big.Int) int64 {
	var quo, mod big.Int
	quo.DivMod(n, d, &mod) // Euclidean: mod ≥ 0, so quo is the floor
	if mod.Sign() != 0 {
		quo.Add(&quo, big.NewInt(1))
	}
	switch {
	case quo.IsInt64():
		return quo.Int64()
	case quo.Sign() > 0:
		return math.MaxInt64
	default:
		return math.MinInt64
	}
}

// String returns the canonical form: the largest suffix of q's notation
// that leaves an integer ("1500m", "1536Mi", "1e3"). Binary quantities
// that are not whole units use decimal suffixes. Parse(q.String()) equals q.
func (q Quantity) String() string {
	n := q.n()
	if n.Sign() == 0 {
		return "0"
	}
	if q.Format() == BinarySI {
		if s, ok := binaryString(n); ok {
			return s
		}
	}
	// Find the largest power of 1000 (from 10^-9 up to 10^18) dividing n.
	exp := -9
	v := new(big.Int).Set(n)
	thousand := big.NewInt(1000)
	var quo, rem big.Int
	for exp < 18 {
		quo.QuoRem(v, thousand, &rem)
		if rem.Sign() != 0 {
			break
		}
		v.Set(&quo)
		exp += 3
	}
	if q.Format() == DecimalExponent {
		if exp == 0 {
			return v.String()
		}
		return v.String() + "e" + strconv.Itoa(exp)
	}
	for suffix, e := range decimalSuffixes {
		if e == exp {
			return v.String() + suffix
		}
	}
	return v.String() // unreachable: every multiple of 3 in range has a suffix
}

// binaryString renders whole-unit n (nanos) with the largest binary suffix
// dividing it.
func binaryString(n *big.Int) (string, bool) {
	var units, rem big.Int
	units.QuoRem(n, bigNano, &rem)
	if rem.Sign() != 0 {
		return "", false
	}
	suffixes := []string{"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}
	i := 0
	var quo, r big.Int
	for i < len(suffixes)-1 {
		quo.QuoRem(&units, big.NewInt(1024), &r)
		if r.Sign() != 0 {
			break
		}
		units.Set(&quo)
		i++
	}
	return units.String() + suffixes[i], true
}
