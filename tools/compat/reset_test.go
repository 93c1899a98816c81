package main

import "testing"

func TestResetSQLText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"1048576", "1048576"},
		{"0.5", "0.5"},
		{"latin1", "'latin1'"},
		{"", "''"},
		{"a'b\\c", `'a\'b\\c'`},
		{"STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION", "'STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION'"},
	} {
		if got := sqlValue(c.in); got != c.want {
			t.Errorf("sqlValue(%q) = %s, want %s", c.in, got, c.want)
		}
	}
	if got := accountName("u'1", "%"); got != `'u\'1'@'%'` {
		t.Errorf("accountName = %s", got)
	}
	if got := quoteIdent("a`b"); got != "`a``b`" {
		t.Errorf("quoteIdent = %s", got)
	}
	for name, want := range map[string]bool{"GTID_SLAVE_POS": true, "RPL_SEMI_SYNC_MASTER_ENABLED": true, "READ_ONLY": true, "SQL_MODE": false} {
		if skipGlobal(name) != want {
			t.Errorf("skipGlobal(%s) = %v", name, !want)
		}
	}
}
