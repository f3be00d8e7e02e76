package results

import (
	"math"
	"strconv"
)

// pow10 are the scales of the decimals appendFixed writes quickly.
var pow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6}

// appendFixed appends v with prec decimals (prec <= 6), byte for byte as
// strconv.AppendFloat(b, v, 'f', prec, 64) does, but without its exact decimal conversion
// where a float multiplication decides the rounding: a results file of a million queries
// writes tens of millions of such fields.
//
// v*10^prec is rounded once in binary, so it is within 2^-10 of the exact product while that
// is below 2^43 (9e6 s at six decimals). When its fraction is farther than 2^-9 from one half,
// the exact product rounds to the same integer, and that integer's digits are the answer;
// otherwise (a tie or near one, which strconv breaks on the exact value), for negative or
// signed-zero values, and for large or non-finite ones, strconv writes it.
func appendFixed(b []byte, v float64, prec int) []byte {
	const limit = 1 << 43
	y := v * pow10[prec]
	if !(y >= 0 && y < limit) || math.Signbit(v) {
		return strconv.AppendFloat(b, v, 'f', prec, 64)
	}
	n := math.Floor(y)
	f := y - n
	if math.Abs(f-0.5) <= 1.0/512 {
		return strconv.AppendFloat(b, v, 'f', prec, 64)
	}
	u := uint64(n)
	if f > 0.5 {
		u++
	}
	// The digits of u, the last prec after the point, written from the right two at a time.
	var digits [24]byte
	i := len(digits)
	for k := prec; k >= 2; k -= 2 {
		r := u % 100
		u /= 100
		i -= 2
		digits[i], digits[i+1] = pairs[2*r], pairs[2*r+1]
	}
	if prec%2 == 1 {
		i--
		digits[i] = byte('0' + u%10)
		u /= 10
	}
	if prec > 0 {
		i--
		digits[i] = '.'
	}
	for u >= 100 {
		r := u % 100
		u /= 100
		i -= 2
		digits[i], digits[i+1] = pairs[2*r], pairs[2*r+1]
	}
	if u >= 10 {
		i -= 2
		digits[i], digits[i+1] = pairs[2*u], pairs[2*u+1]
	} else {
		i--
		digits[i] = byte('0' + u)
	}
	return append(b, digits[i:]...)
}

// pairs are the two-digit numbers 00 to 99.
const pairs = "00010203040506070809" + "10111213141516171819" + "20212223242526272829" + "30313233343536373839" +
	"40414243444546474849" + "50515253545556575859" + "60616263646566676869" + "70717273747576777879" +
	"80818283848586878889" + "90919293949596979899"
