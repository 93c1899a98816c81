-- Every column type, NULLs included, as `mariadb --batch` prints them.
CREATE OR REPLACE TABLE cli_types (
  id INT PRIMARY KEY, ti TINYINT, si SMALLINT UNSIGNED, mi MEDIUMINT, bi BIGINT UNSIGNED,
  de DECIMAL(12,4), fl FLOAT, db DOUBLE, bt BIT(8), ch CHAR(5), vc VARCHAR(50), tx TEXT,
  bl BLOB, vb VARBINARY(8), dt DATE, tm TIME(3), dtm DATETIME(6), ts TIMESTAMP NULL, yr YEAR,
  en ENUM('a','b'), st SET('x','y'), js JSON, geo POINT, u UUID, i4 INET4, i6 INET6
) CHARSET utf8mb4;
INSERT INTO cli_types VALUES
  (1, -128, 65535, -8388608, 18446744073709551615, 12345678.1234, 1.5, 2.25e300, b'10100101', 'abc',
   'héllo 😀 中文', REPEAT('t', 300), UNHEX('00FF10'), 0x0102, '1999-12-31', '-838:59:59.000',
   '2024-02-29 23:59:58.123456', '2020-01-01 00:00:00', 2155, 'b', 'x,y', '{"a": [1, {"b": null}]}',
   POINT(1, 2), '123e4567-e89b-12d3-a456-426655440000', '10.0.0.1', '::1'),
  (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
   NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
SELECT * FROM cli_types ORDER BY id;
SELECT id, HEX(bt), HEX(bl), ST_AsText(geo), JSON_EXTRACT(js, '$.a[1]') FROM cli_types ORDER BY id;
SELECT CAST(-9223372036854775808 AS SIGNED), 1e-300, 0.1 + 0.2, NULL, '', 'a\tb\nc';
