-- Several statements, result sets of procedures, errors (--force goes on) and warnings.
SELECT 1 AS one; SELECT 2 AS two, 3 AS three;
DELIMITER //
CREATE OR REPLACE PROCEDURE cli_sets(IN n INT, OUT doubled INT)
  BEGIN SELECT n AS n; SELECT n * 2 AS twice, 'x' AS s; SET doubled = n * 2; END//
DELIMITER ;
CALL cli_sets(21, @d);
SELECT @d;
SELECT * FROM cli_no_such_table;
SELEC 1;
CREATE OR REPLACE TABLE cli_dup (id INT PRIMARY KEY);
INSERT INTO cli_dup VALUES (1);
INSERT INTO cli_dup VALUES (1);
SET sql_mode = 'ERROR_FOR_DIVISION_BY_ZERO';
SELECT 1/0, CAST('12abc' AS INT);
CREATE OR REPLACE TABLE cli_warn (a TINYINT);
INSERT IGNORE INTO cli_warn VALUES (1000), (-1000);
SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 1644, MESSAGE_TEXT = 'custom signal';
SELECT 'still here';
