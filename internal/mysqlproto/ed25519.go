package mysqlproto

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"

	"filippo.io/edwards25519"
)

// MariaDB's ed25519 authentication (server plugin auth_ed25519, client
// plugin client_ed25519; MariaDB's plugin/auth_ed25519, ref10 crypto_sign
// with the password in place of the 32-byte seed):
//
//	az     = SHA-512(password)                 (any length of password)
//	a      = clamp(az[0:32])                   the secret scalar
//	A      = a·B                               the public key, 32 bytes; the
//	                                           server stores base64(A) without
//	                                           padding (43 characters) as the
//	                                           account's authentication_string
//	nonce  = 32 random bytes                   the server's AuthSwitchRequest data
//	r      = SHA-512(az[32:64] ‖ nonce) mod ℓ
//	sig    = R ‖ S, R = r·B, S = r + SHA-512(R ‖ A ‖ nonce)·a mod ℓ (64 bytes)
//
// The signature is a standard Ed25519 signature (RFC 8032) under A, so
// crypto/ed25519.Verify checks it; only the key derivation differs from
// RFC 8032 (SHA-512 of the password instead of a 32-byte seed).

// PluginEd25519 is the client-side name of MariaDB's ed25519 plugin, the one
// an AuthSwitchRequest names.
const PluginEd25519 = "client_ed25519"

// Ed25519NonceLen is the length of the client_ed25519 challenge in bytes.
const Ed25519NonceLen = 32

// Ed25519SigLen is the length of a client_ed25519 answer in bytes.
const Ed25519SigLen = ed25519.SignatureSize

// ErrBadEd25519Key: a configured or loaded ed25519 public key is not 43
// characters of unpadded base64 that decode to 32 bytes.
var ErrBadEd25519Key = errors.New("mysqlproto: ed25519 public key must be 43 characters of base64 (32 bytes), as mysql.global_priv shows it")

// Ed25519PublicKey derives the account's public key from password, as
// MariaDB's ed25519_password() and CREATE USER ... IDENTIFIED VIA ed25519
// USING PASSWORD('...') compute it.
func Ed25519PublicKey(password string) ed25519.PublicKey {
	az := Ed25519Secret(password)
	a, err := edwards25519.NewScalar().SetBytesWithClamping(az[:32])
	if err != nil { // cannot happen: the input is 32 bytes
		panic(err)
	}
	return ed25519.PublicKey(new(edwards25519.Point).ScalarBaseMult(a).Bytes())
}

// FormatEd25519Key formats a public key as MariaDB stores it: base64 without
// padding, 43 characters.
func FormatEd25519Key(pub ed25519.PublicKey) string {
	return base64.RawStdEncoding.EncodeToString(pub)
}

// ParseEd25519Key decodes a public key in MariaDB's form (43 characters of
// unpadded base64; a trailing "=" is accepted). The error never contains
// the key.
func ParseEd25519Key(s string) (ed25519.PublicKey, error) {
	if len(s) == 44 && s[43] == '=' {
		s = s[:43]
	}
	if len(s) != 43 {
		return nil, ErrBadEd25519Key
	}
	b, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, ErrBadEd25519Key
	}
	if _, err := new(edwards25519.Point).SetBytes(b); err != nil {
		return nil, fmt.Errorf("%w (not a point of the curve)", ErrBadEd25519Key)
	}
	return ed25519.PublicKey(b), nil
}

// Ed25519Secret returns SHA-512(password), all that signing a
// client_ed25519 challenge needs (it is as secret as the password).
func Ed25519Secret(password string) [64]byte {
	return sha512.Sum512([]byte(password))
}

// Ed25519Sign answers a client_ed25519 challenge (the server's nonce) with
// the secret of Ed25519Secret: the 64-byte signature MariaDB's client plugin
// sends.
func Ed25519Sign(secret *[64]byte, nonce []byte) []byte {
	a, _ := edwards25519.NewScalar().SetBytesWithClamping(secret[:32])
	pub := new(edwards25519.Point).ScalarBaseMult(a).Bytes()

	h := sha512.New()
	h.Write(secret[32:])
	h.Write(nonce)
	r, _ := edwards25519.NewScalar().SetUniformBytes(h.Sum(nil))
	R := new(edwards25519.Point).ScalarBaseMult(r).Bytes()

	h.Reset()
	h.Write(R)
	h.Write(pub)
	h.Write(nonce)
	k, _ := edwards25519.NewScalar().SetUniformBytes(h.Sum(nil))
	S := edwards25519.NewScalar().MultiplyAdd(k, a, r)
	return append(R, S.Bytes()...)
}

// Ed25519Verify checks a client's client_ed25519 answer sig to nonce
// against the account's public key.
func Ed25519Verify(pub ed25519.PublicKey, nonce, sig []byte) bool {
	if len(pub) != ed25519.PublicKeySize || len(sig) != Ed25519SigLen {
		return false
	}
	return ed25519.Verify(pub, nonce, sig)
}

// NewEd25519Nonce returns a fresh 32-byte client_ed25519 challenge. Its last
// byte is never 0: some clients (go-sql-driver/mysql) drop a trailing NUL
// from AuthSwitchRequest data, which would shorten the nonce they sign.
func NewEd25519Nonce() ([]byte, error) {
	b := make([]byte, Ed25519NonceLen)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("mysqlproto: ed25519 nonce: %w", err)
	}
	if b[len(b)-1] == 0 {
		b[len(b)-1] = 1
	}
	return b, nil
}

// AppendEd25519Switch appends the AuthSwitchRequest to client_ed25519 with
// nonce: unlike mysql_native_password's, the data has no trailing NUL (the
// client signs every byte after the plugin name's terminator).
func AppendEd25519Switch(b []byte, nonce []byte) []byte {
	b = append(b, 0xfe)
	b = append(b, PluginEd25519...)
	b = append(b, 0)
	return append(b, nonce...)
}
