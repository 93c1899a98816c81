package mysqlproto

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

const testCaps = mysql.CLIENT_LONG_PASSWORD | mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_SECURE_CONNECTION |
	mysql.CLIENT_PLUGIN_AUTH | mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA | mysql.CLIENT_CONNECT_WITH_DB |
	mysql.CLIENT_CONNECT_ATTRS | mysql.CLIENT_DEPRECATE_EOF | mysql.CLIENT_SESSION_TRACK

func TestHandshakeRoundTrip(t *testing.T) {
	scramble := []byte("abcdefghijklmnopqrst")
	cases := []Handshake{
		{ServerVersion: "5.5.5-10.11.19-MariaDB-0+deb12u1-log", ConnectionID: 42, Scramble: scramble,
			Capabilities: testCaps, Charset: 45, Status: mysql.SERVER_STATUS_AUTOCOMMIT, AuthPlugin: "mysql_native_password"},
		// MariaDB style: CLIENT_MYSQL clear, extended capabilities present.
		{ServerVersion: "10.11.19-MariaDB", ConnectionID: 1 << 31, Scramble: scramble,
			Capabilities: testCaps &^ mysql.CLIENT_LONG_PASSWORD, ExtCapabilities: 0x1d, Charset: 8, Status: 0, AuthPlugin: "mysql_native_password"},
	}
	for _, h := range cases {
		p := AppendHandshake(nil, &h)
		got, err := ParseHandshake(p)
		if err != nil {
			t.Fatalf("%s: %v", h.ServerVersion, err)
		}
		if !reflect.DeepEqual(*got, h) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", *got, h)
		}
	}
}

// A real MariaDB 10.11.19 greeting (captured from mariadbd on Debian 12), to
// pin the parser to the wire.
func TestParseHandshakeMariaDBCapture(t *testing.T) {
	p := []byte("\n5.5.5-10.11.19-MariaDB-0+deb12u1\x00\x03\x00\x00\x00SU3=wdmv\x00\xfe\xf7\x08\x02\x00" +
		"\xff\x81\x15\x00\x00\x00\x00\x00\x00\x1d\x00\x00\x00,qv\"?Vr\\ToU<\x00mysql_native_password\x00")
	h, err := ParseHandshake(p)
	if err != nil {
		t.Fatal(err)
	}
	if h.ServerVersion != "5.5.5-10.11.19-MariaDB-0+deb12u1" || h.ConnectionID != 3 {
		t.Fatalf("version/id: %q %d", h.ServerVersion, h.ConnectionID)
	}
	if string(h.Scramble) != `SU3=wdmv,qv"?Vr\ToU<` {
		t.Fatalf("scramble %q", h.Scramble)
	}
	if h.Capabilities&mysql.CLIENT_LONG_PASSWORD != 0 || h.ExtCapabilities != 0x1d {
		t.Fatalf("caps %x ext %x", h.Capabilities, h.ExtCapabilities)
	}
	if h.Capabilities&mysql.CLIENT_DEPRECATE_EOF == 0 || h.AuthPlugin != "mysql_native_password" || h.Charset != 8 {
		t.Fatalf("caps %x plugin %q charset %d", h.Capabilities, h.AuthPlugin, h.Charset)
	}
}

func TestParseHandshakeServerError(t *testing.T) {
	p := AppendERR(nil, mysql.ER_CON_COUNT_ERROR, "08004", "Too many connections")
	_, err := ParseHandshake(p)
	me, ok := err.(*mysql.MyError)
	if !ok || me.Code != mysql.ER_CON_COUNT_ERROR {
		t.Fatalf("got %v", err)
	}
}

func TestHandshakeResponseRoundTrip(t *testing.T) {
	attrs := []byte("\x0c_client_name\x08libmysql")
	cases := []HandshakeResponse{
		{Capabilities: testCaps, MaxPacketSize: 1 << 24, Charset: 45, User: "app",
			AuthResponse: bytes.Repeat([]byte{0xaa}, 20), Database: "sbtest", AuthPlugin: "mysql_native_password", Attrs: attrs},
		{Capabilities: testCaps &^ (mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA | mysql.CLIENT_CONNECT_WITH_DB | mysql.CLIENT_CONNECT_ATTRS),
			MaxPacketSize: 0, Charset: 8, User: "u", AuthResponse: []byte{}, AuthPlugin: "caching_sha2_password"},
		{Capabilities: testCaps &^ mysql.CLIENT_LONG_PASSWORD, ExtCapabilities: 0x4, Charset: 33, User: "maria",
			AuthResponse: []byte{1, 2, 3}, Database: "", AuthPlugin: "client_ed25519", Attrs: []byte{}},
	}
	for _, r := range cases {
		p := AppendHandshakeResponse(nil, &r)
		got, err := ParseHandshakeResponse(p)
		if err != nil {
			t.Fatalf("%s: %v", r.User, err)
		}
		if !reflect.DeepEqual(*got, r) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", *got, r)
		}
	}
}

func TestParseSSLRequest(t *testing.T) {
	r := HandshakeResponse{Capabilities: testCaps | mysql.CLIENT_SSL, Charset: 45, SSLRequest: true}
	got, err := ParseHandshakeResponse(AppendHandshakeResponse(nil, &r))
	if err != nil || !got.SSLRequest {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestParseHandshakeResponseRejectsOldProtocol(t *testing.T) {
	r := HandshakeResponse{Capabilities: mysql.CLIENT_SECURE_CONNECTION, User: "x"}
	if _, err := ParseHandshakeResponse(AppendHandshakeResponse(nil, &r)); err == nil {
		t.Fatal("protocol 4.0 response accepted")
	}
	for cut := 0; cut < 33; cut++ {
		full := AppendHandshakeResponse(nil, &HandshakeResponse{Capabilities: testCaps, User: "app"})
		if _, err := ParseHandshakeResponse(full[:cut]); err == nil {
			t.Fatalf("truncated at %d accepted", cut)
		}
	}
}

func TestAuthSwitchRoundTrip(t *testing.T) {
	data := []byte("01234567890123456789")
	p := AppendAuthSwitchRequest(nil, mysql.AUTH_NATIVE_PASSWORD, data)
	r, err := ParseAuthSwitchRequest(p)
	if err != nil || r.Plugin != mysql.AUTH_NATIVE_PASSWORD || !bytes.Equal(r.Data, data) {
		t.Fatalf("got %+v %v", r, err)
	}
	if _, err := ParseAuthSwitchRequest([]byte{0xfe}); err == nil {
		t.Fatal("old-password switch accepted")
	}
}

func TestChangeUserRoundTrip(t *testing.T) {
	caps := testCaps
	cases := []ChangeUser{
		{User: "app2", AuthResponse: bytes.Repeat([]byte{7}, 20), Database: "db", Charset: 45,
			AuthPlugin: "mysql_native_password", Attrs: []byte("\x01a\x01b")},
		{User: "x", AuthResponse: []byte{}, Database: "", Charset: 8, AuthPlugin: "", Attrs: []byte{}},
	}
	for _, cu := range cases {
		got, err := ParseChangeUser(AppendChangeUser(nil, &cu, caps), caps)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*got, cu) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", *got, cu)
		}
	}
	// The short form (no charset and what follows) is valid too.
	short := append([]byte{mysql.COM_CHANGE_USER}, "bob\x00\x00db\x00"...)
	got, err := ParseChangeUser(short, caps)
	if err != nil || got.User != "bob" || got.Database != "db" || got.Charset != 0 {
		t.Fatalf("short form: %+v %v", got, err)
	}
}

// FuzzParseHandshakeResponse: arbitrary payloads never panic, and anything
// accepted survives a build/parse round trip.
func FuzzParseHandshakeResponse(f *testing.F) {
	f.Add(AppendHandshakeResponse(nil, &HandshakeResponse{Capabilities: testCaps, User: "app",
		AuthResponse: make([]byte, 20), Database: "d", AuthPlugin: "mysql_native_password", Attrs: []byte("\x01k\x01v")}))
	f.Add(AppendHandshakeResponse(nil, &HandshakeResponse{Capabilities: testCaps | mysql.CLIENT_SSL, SSLRequest: true}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := ParseHandshakeResponse(p)
		if err != nil {
			return
		}
		if r.SSLRequest {
			return
		}
		if r.Capabilities&(mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA|mysql.CLIENT_SECURE_CONNECTION) == 0 || len(r.AuthResponse) > 255 {
			return // forms the builder does not produce
		}
		if r.Capabilities&mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA == 0 && len(r.AuthResponse) > 255 {
			return
		}
		again, err := ParseHandshakeResponse(AppendHandshakeResponse(nil, r))
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if again.User != r.User || !bytes.Equal(again.AuthResponse, r.AuthResponse) {
			t.Fatalf("round trip changed user or auth response")
		}
	})
}

// FuzzParseHandshake: arbitrary server greetings never panic.
func FuzzParseHandshake(f *testing.F) {
	f.Add(AppendHandshake(nil, &Handshake{ServerVersion: "8.0.36", Scramble: []byte("abcdefghijklmnopqrst"),
		Capabilities: testCaps, AuthPlugin: "caching_sha2_password"}))
	f.Fuzz(func(t *testing.T, p []byte) {
		_, _ = ParseHandshake(p)
		_, _ = ParseAuthSwitchRequest(p)
		_, _ = ParseChangeUser(p, testCaps)
	})
}
