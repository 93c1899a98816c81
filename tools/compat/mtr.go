package main

var mtrSuite = suite{name: "mtr"}
var clientTestSuite = suite{name: "clienttest"}
