package mysqlproto

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// caching_sha2_password, MySQL 8's default plugin
// (https://dev.mysql.com/doc/dev/mysql-server/latest/page_caching_sha2_authentication_exchanges.html):
//
//	token = SHA256(pw) XOR SHA256(SHA256(SHA256(pw)) ‖ scramble)   fast path
//
// The server checks it against a cached verifier SHA256(SHA256(pw)) and,
// when it has none (or the check fails), asks for full authentication
// (AuthMoreData 0x04): the client then sends the password itself — in
// clear over TLS, or RSA-OAEP(SHA-1)-encrypted with the server's public key
// (which it may ask for with the byte 0x02) after XOR-ing password + NUL
// with the scramble, repeated.

// PluginCachingSHA2 is the plugin name of MySQL 8's caching_sha2_password.
const PluginCachingSHA2 = "caching_sha2_password"

// caching_sha2_password AuthMoreData bytes and the client's public key
// request.
const (
	SHA2FastAuthOK       = 0x03 // server: the fast path succeeded, an OK follows
	SHA2FullAuth         = 0x04 // server: send the password (TLS) or ask for the key
	SHA2RequestPublicKey = 0x02 // client: send me your RSA public key
)

// SHA2Len is the length of SHA-256 digests in bytes.
const SHA2Len = sha256.Size

// SHA2Verifier returns SHA256(SHA256(password)), what the fast path checks
// a token against.
func SHA2Verifier(password string) [SHA2Len]byte {
	s1 := sha256.Sum256([]byte(password))
	return sha256.Sum256(s1[:])
}

// SHA2Token computes a client's fast-path answer to scramble for password
// (empty for an empty password).
func SHA2Token(scramble []byte, password string) []byte {
	if password == "" {
		return []byte{}
	}
	s1 := sha256.Sum256([]byte(password))
	v := sha256.Sum256(s1[:])
	h := sha256.New()
	h.Write(v[:])
	h.Write(scramble)
	mix := h.Sum(nil)
	for i := range mix {
		mix[i] ^= s1[i]
	}
	return mix
}

// SHA2VerifyFast checks a fast-path token against the verifier for scramble
// in constant time.
func SHA2VerifyFast(scramble, token []byte, verifier [SHA2Len]byte) bool {
	if len(token) != SHA2Len {
		return false
	}
	h := sha256.New()
	h.Write(verifier[:])
	h.Write(scramble)
	mix := h.Sum(nil)
	var s1 [SHA2Len]byte
	for i := range s1 {
		s1[i] = token[i] ^ mix[i]
	}
	check := sha256.Sum256(s1[:])
	return subtle.ConstantTimeCompare(check[:], verifier[:]) == 1
}

// RSAKey is the key pair a server uses for caching_sha2_password full
// authentication without TLS.
type RSAKey struct {
	Private *rsa.PrivateKey
	// PEM is the public key as the server sends it (PKIX, "PUBLIC KEY").
	PEM []byte
}

// NewRSAKey generates a 2048-bit key pair.
func NewRSAKey() (*RSAKey, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("mysqlproto: generating the RSA key: %w", err)
	}
	return rsaKeyOf(k)
}

// LoadRSAKey reads a PEM private key ("RSA PRIVATE KEY", PKCS #1, or
// "PRIVATE KEY", PKCS #8) from path.
func LoadRSAKey(path string) (*RSAKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mysqlproto: RSA key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("mysqlproto: RSA key %s: no PEM block", path)
	}
	var k *rsa.PrivateKey
	switch blk.Type {
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
	case "PRIVATE KEY":
		var any any
		if any, err = x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
			var ok bool
			if k, ok = any.(*rsa.PrivateKey); !ok {
				err = errors.New("not an RSA key")
			}
		}
	default:
		err = fmt.Errorf("PEM block %q is not a private key", blk.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("mysqlproto: RSA key %s: %w", path, err)
	}
	return rsaKeyOf(k)
}

func rsaKeyOf(k *rsa.PrivateKey) (*RSAKey, error) {
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("mysqlproto: RSA public key: %w", err)
	}
	return &RSAKey{Private: k, PEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})}, nil
}

// DecryptPassword undoes a client's RSA full-authentication answer:
// RSA-OAEP(SHA-1) decryption, XOR with the scramble (repeated), and the
// trailing NUL removed. It returns the password.
func (k *RSAKey) DecryptPassword(scramble, enc []byte) (string, error) {
	plain, err := rsa.DecryptOAEP(sha1.New(), nil, k.Private, enc, nil)
	if err != nil {
		return "", errors.New("mysqlproto: the encrypted password does not decrypt with this proxy's RSA key")
	}
	if len(scramble) == 0 {
		return "", errors.New("mysqlproto: empty scramble")
	}
	for i := range plain {
		plain[i] ^= scramble[i%len(scramble)]
	}
	if n := len(plain); n > 0 && plain[n-1] == 0 {
		plain = plain[:n-1]
	}
	return string(plain), nil
}

// ClearPassword reads a cleartext full-authentication answer: the password
// followed by NUL.
func ClearPassword(p []byte) string {
	if n := len(p); n > 0 && p[n-1] == 0 {
		p = p[:n-1]
	}
	return string(p)
}
