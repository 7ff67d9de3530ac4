package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Standard Webhooks header names.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every signing secret.
const SecretPrefix = "whsec_"

// NewSecret returns a fresh signing secret: "whsec_" + base64 of 32 random bytes.
func NewSecret() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// secretKey decodes a signing secret (the whsec_ prefix optional, then the HMAC key in
// padded standard base64, at least one byte long) into its key. Its error says what is
// wrong in the words of the TypeScript and Python SDKs, and never quotes the secret.
func secretKey(secret string) ([]byte, error) {
	raw := strings.TrimPrefix(secret, SecretPrefix)
	key, err := base64.StdEncoding.DecodeString(raw)
	if err == nil && len(key) > 0 {
		return key, nil
	}
	return nil, errors.New("webhook: the signing secret " + secretProblem(secret, raw))
}

// secretProblem says why secret, whose key part is raw, does not decode.
func secretProblem(secret, raw string) string {
	// encoding/base64 skips \r and \n, so a trailing newline alone is no problem.
	data := strings.TrimRight(strings.NewReplacer("\r", "", "\n", "").Replace(raw), "=")
	switch {
	case secret == "":
		return "is empty"
	case data == "" && !strings.Contains(raw, "="):
		return "has an empty key (nothing after whsec_)"
	case strings.ContainsFunc(data, unicode.IsSpace):
		return "has whitespace in it"
	case strings.ContainsFunc(data, func(c rune) bool { return !strings.ContainsRune(base64Alphabet, c) }):
		return "is not whsec_ followed by base64 (it has characters outside A-Z, a-z, 0-9, + and /, or = before the end)"
	default:
		return "is not whsec_ followed by base64 (its length does not fit base64: cut short, or missing or wrong = padding)"
	}
}

// base64Alphabet is standard base64's, which secrets are written in.
const base64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// ValidSecret reports whether secret has the whsec_ + base64 form.
func ValidSecret(secret string) bool {
	if !strings.HasPrefix(secret, SecretPrefix) {
		return false
	}
	key, err := secretKey(secret)
	return err == nil && len(key) >= 16
}

// Sign returns the "v1,<base64 HMAC-SHA256>" signature of id.timestamp.body.
func Sign(secret, id string, timestamp time.Time, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	return string(appendSignature(nil, hmac.New(sha256.New, key), id, timestamp.Unix(), body)), nil
}

// Signer signs with one secret, its key decoded once and its HMAC states reused: what
// a sender that signs every request with the same few secrets keeps per secret. Safe
// for concurrent use.
type Signer struct {
	macs sync.Pool // hash.Hash: HMAC-SHA256 keyed with the secret
}

// NewSigner decodes secret ("whsec_" + base64).
func NewSigner(secret string) (*Signer, error) {
	key, err := secretKey(secret)
	if err != nil {
		return nil, err
	}
	s := &Signer{}
	s.macs.New = func() any { return hmac.New(sha256.New, key) }
	return s, nil
}

// AppendSignature appends "v1,<base64 HMAC-SHA256 of id.timestamp.body>" to dst.
func (s *Signer) AppendSignature(dst []byte, id string, unix int64, body []byte) []byte {
	mac := s.macs.Get().(hash.Hash)
	mac.Reset()
	dst = appendSignature(dst, mac, id, unix, body)
	s.macs.Put(mac)
	return dst
}

// appendSignature appends the v1 signature that the keyed, reset mac makes of
// id.timestamp.body.
func appendSignature(dst []byte, mac hash.Hash, id string, unix int64, body []byte) []byte {
	var head [96]byte
	h := append(head[:0], id...)
	h = append(h, '.')
	h = strconv.AppendInt(h, unix, 10)
	h = append(h, '.')
	mac.Write(h)
	mac.Write(body)
	var sum [sha256.Size]byte
	dst = append(dst, "v1,"...)
	return base64.StdEncoding.AppendEncode(dst, mac.Sum(sum[:0]))
}

// SetHeaders signs body with every secret given (one signature each, space-separated, as
// during a rotation window) and sets the three Standard Webhooks headers.
func SetHeaders(h http.Header, id string, timestamp time.Time, body []byte, secrets ...string) error {
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		sig, err := Sign(s, id, timestamp, body)
		if err != nil {
			return err
		}
		sigs = append(sigs, sig)
	}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(timestamp.Unix(), 10))
	h.Set(HeaderSignature, strings.Join(sigs, " "))
	return nil
}

// ErrBadSignature is returned by Verify when no signature matches.
var ErrBadSignature = errors.New("webhook: no matching signature")

// DefaultTolerance is how far a webhook-timestamp may be from now.
const DefaultTolerance = 5 * time.Minute

// Verify checks a request's Standard Webhooks headers against body and secret: one of
// the space-separated v1 signatures must match and the timestamp must be within
// tolerance of now (DefaultTolerance when zero).
func Verify(secret string, h http.Header, body []byte, tolerance time.Duration) error {
	id, unix, sigs, err := signedHeaders(h, tolerance)
	if err != nil {
		return err
	}
	key, err := secretKey(secret)
	if err != nil {
		return err
	}
	var buf [64]byte
	return matchSignature(sigs, appendSignature(buf[:0], hmac.New(sha256.New, key), id, unix, body))
}

// Verify is the package's Verify with the signer's secret, its key decoded once and its
// HMAC states reused (Handler verifies every request this way).
func (s *Signer) Verify(h http.Header, body []byte, tolerance time.Duration) error {
	id, unix, sigs, err := signedHeaders(h, tolerance)
	if err != nil {
		return err
	}
	var buf [64]byte
	return matchSignature(sigs, s.AppendSignature(buf[:0], id, unix, body))
}

// signedHeaders reads the three Standard Webhooks headers of h, the timestamp checked
// against tolerance of now (DefaultTolerance when zero).
func signedHeaders(h http.Header, tolerance time.Duration) (id string, unix int64, sigs string, err error) {
	if tolerance == 0 {
		tolerance = DefaultTolerance
	}
	id, tsText, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || tsText == "" || sigs == "" {
		return "", 0, "", fmt.Errorf("webhook: missing %s, %s or %s header", HeaderID, HeaderTimestamp, HeaderSignature)
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return "", 0, "", fmt.Errorf("webhook: bad %s", HeaderTimestamp)
	}
	at := time.Unix(ts, 0)
	if d := time.Since(at); d > tolerance || d < -tolerance {
		return "", 0, "", fmt.Errorf("webhook: timestamp %s is outside the tolerance of %s", at.UTC().Format(time.RFC3339), tolerance)
	}
	return id, ts, sigs, nil
}

// matchSignature reports whether one of the space-separated signatures sigs is want.
func matchSignature(sigs string, want []byte) error {
	for _, s := range strings.Fields(sigs) {
		if hmac.Equal([]byte(s), want) {
			return nil
		}
	}
	return ErrBadSignature
}
