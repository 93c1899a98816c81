-- A compound statement with a cursor outside a stored program.
CREATE OR REPLACE TABLE cli_cur (v INT);
INSERT INTO cli_cur VALUES (1), (2), (3);
DELIMITER //
BEGIN NOT ATOMIC
  DECLARE done INT DEFAULT 0; DECLARE x INT; DECLARE s INT DEFAULT 0;
  DECLARE cr CURSOR FOR SELECT v FROM cli_cur;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = 1;
  OPEN cr;
  l: LOOP FETCH cr INTO x; IF done THEN LEAVE l; END IF; SET s = s + x; END LOOP;
  CLOSE cr;
  SELECT s;
END//
DELIMITER ;
SELECT 'after the compound statement';
