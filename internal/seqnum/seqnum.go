// Package seqnum validates, orders and encodes Kinesis sequence numbers.
//
// A sequence number is a decimal string matching 0|([1-9]\d{0,128}) (Kinesis API reference,
// SequenceNumber pattern). It is too long for a DynamoDB Number (38 digits) and a plain string
// comparison gets the order wrong ("9" > "10"). Encode produces an order-preserving fixed-prefix
// string: three digits giving the length, then the digits. For canonical numbers (no leading
// zeros) a longer number is always larger, so byte order of the encoding equals numeric order,
// which is what DynamoDB uses for string sort keys and conditions.
package seqnum

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
)

// MaxDigits is the longest sequence number Kinesis allows.
const MaxDigits = 129

// lenWidth is the width of the length prefix in an encoding.
const lenWidth = 3

// ErrInvalid is returned (wrapped) for a string that is not a valid sequence number.
var ErrInvalid = errors.New("invalid sequence number")

// Validate reports whether s is a canonical Kinesis sequence number.
func Validate(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty", ErrInvalid)
	case len(s) > MaxDigits:
		return fmt.Errorf("%w: %d digits, at most %d allowed", ErrInvalid, len(s), MaxDigits)
	case len(s) > 1 && s[0] == '0':
		return fmt.Errorf("%w: %q has a leading zero", ErrInvalid, clip(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return fmt.Errorf("%w: %q has a non-digit at position %d", ErrInvalid, clip(s), i)
		}
	}
	return nil
}

// Encode returns the order-preserving encoding of s, or an error wrapping ErrInvalid.
func Encode(s string) (string, error) {
	if err := Validate(s); err != nil {
		return "", err
	}
	return encodeValid(s), nil
}

// MustEncode is Encode for sequence numbers already validated; it panics on invalid input and
// is meant for tests and constants only.
func MustEncode(s string) string {
	e, err := Encode(s)
	if err != nil {
		panic(err)
	}
	return e
}

func encodeValid(s string) string {
	buf := make([]byte, 0, lenWidth+len(s))
	n := strconv.Itoa(len(s))
	for i := len(n); i < lenWidth; i++ {
		buf = append(buf, '0')
	}
	buf = append(buf, n...)
	buf = append(buf, s...)
	return string(buf)
}

// Decode reverses Encode.
func Decode(e string) (string, error) {
	if len(e) < lenWidth+1 {
		return "", fmt.Errorf("%w: encoding %q too short", ErrInvalid, clip(e))
	}
	n, err := strconv.Atoi(e[:lenWidth])
	if err != nil || n != len(e)-lenWidth {
		return "", fmt.Errorf("%w: encoding %q has a bad length prefix", ErrInvalid, clip(e))
	}
	s := e[lenWidth:]
	if err := Validate(s); err != nil {
		return "", err
	}
	return s, nil
}

// Compare orders two valid sequence numbers numerically: -1, 0 or +1. Inputs must have passed
// Validate; Compare does not allocate.
func Compare(a, b string) int {
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Big parses a valid sequence number into a big.Int.
func Big(s string) (*big.Int, error) {
	if err := Validate(s); err != nil {
		return nil, err
	}
	v, _ := new(big.Int).SetString(s, 10)
	return v, nil
}

// Next returns s+1, the smallest sequence number greater than s (for exclusive range starts).
func Next(s string) (string, error) {
	v, err := Big(s)
	if err != nil {
		return "", err
	}
	next := v.Add(v, big.NewInt(1)).String()
	if len(next) > MaxDigits {
		return "", fmt.Errorf("%w: %q has no successor within %d digits", ErrInvalid, clip(s), MaxDigits)
	}
	return next, nil
}

// clip keeps error messages readable for hostile inputs.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
