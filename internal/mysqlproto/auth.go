package mysqlproto

import (
	"crypto/rand"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// mysql_native_password, as MySQL and MariaDB implement it
// (https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_connection_phase_authentication_methods_native_password_authentication.html):
//
//	stage1 = SHA1(password)             what a client needs to answer a challenge
//	stage2 = SHA1(stage1)               what the server stores ("*" + hex in mysql.user)
//	token  = stage1 XOR SHA1(scramble + stage2)
//
// The server checks SHA1(token XOR SHA1(scramble + stage2)) == stage2, which
// also yields stage1: a proxy that stores only stage2 learns stage1 from one
// successful client login and can then answer a backend's challenge itself.

// HashLen is the length of SHA1 digests (stage1, stage2, tokens) in bytes.
const HashLen = sha1.Size

// ErrBadPasswordHash: a configured mysql_native_password hash is not "*"
// followed by 40 hexadecimal digits.
var ErrBadPasswordHash = errors.New(`mysqlproto: password hash must be "*" followed by 40 hex digits`)

// NativeStage1 returns SHA1(password).
func NativeStage1(password string) [HashLen]byte {
	return sha1.Sum([]byte(password))
}

// NativeStage2 returns SHA1(stage1), the stored hash.
func NativeStage2(stage1 [HashLen]byte) [HashLen]byte {
	return sha1.Sum(stage1[:])
}

// ParseNativeHash decodes a mysql_native_password hash as stored in mysql.user
// ("*" + 40 hex digits, case-insensitive) into stage2. The error never
// contains the hash.
func ParseNativeHash(s string) ([HashLen]byte, error) {
	var out [HashLen]byte
	if len(s) != 2*HashLen+1 || s[0] != '*' {
		return out, ErrBadPasswordHash
	}
	if _, err := hex.Decode(out[:], []byte(strings.ToLower(s[1:]))); err != nil {
		return out, ErrBadPasswordHash
	}
	return out, nil
}

// FormatNativeHash formats stage2 as "*" + 40 uppercase hex digits.
func FormatNativeHash(stage2 [HashLen]byte) string {
	return "*" + strings.ToUpper(hex.EncodeToString(stage2[:]))
}

// NativeToken computes the client's answer to scramble from stage1
// (= SHA1(password)): stage1 XOR SHA1(scramble + SHA1(stage1)).
func NativeToken(scramble []byte, stage1 [HashLen]byte) []byte {
	stage2 := sha1.Sum(stage1[:])
	h := sha1.New()
	h.Write(scramble)
	h.Write(stage2[:])
	var mix [HashLen]byte
	h.Sum(mix[:0])
	out := make([]byte, HashLen)
	for i := range out {
		out[i] = mix[i] ^ stage1[i]
	}
	return out
}

// VerifyNative checks a client's token against stage2 for scramble. On
// success it returns the client's stage1 (SHA1(password)), recovered as
// token XOR SHA1(scramble + stage2). The comparison is constant-time.
func VerifyNative(scramble, token []byte, stage2 [HashLen]byte) (stage1 [HashLen]byte, ok bool) {
	if len(token) != HashLen {
		return stage1, false
	}
	h := sha1.New()
	h.Write(scramble)
	h.Write(stage2[:])
	var mix [HashLen]byte
	h.Sum(mix[:0])
	for i := range stage1 {
		stage1[i] = token[i] ^ mix[i]
	}
	check := sha1.Sum(stage1[:])
	if subtle.ConstantTimeCompare(check[:], stage2[:]) != 1 {
		return [HashLen]byte{}, false
	}
	return stage1, true
}

// NewScramble returns n random bytes usable as a handshake challenge: printable
// ASCII without NUL (part 2 of the challenge is NUL-terminated on the wire)
// and without '$', as MySQL generates them.
func NewScramble(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("mysqlproto: scramble: %w", err)
	}
	for i, c := range b {
		c = 0x21 + c%(0x7e-0x21)
		if c == '$' {
			c = '#'
		}
		b[i] = c
	}
	return b, nil
}
