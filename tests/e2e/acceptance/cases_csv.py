"""Issue 16, the remaining CSV options: ESCAPE, ESCAPE_UNENCLOSED_FIELD, RECORD_DELIMITER and
FIELD_DELIMITER in every documented spelling, MULTI_LINE, ENCODING, REPLACE_INVALID_CHARACTERS,
SKIP_BYTE_ORDER_MARK, and invalid UTF-8 as an error of its row (decision 70)."""

from __future__ import annotations

from tests.e2e.acceptance.case import Case

CIT = "[CIT] https://docs.snowflake.com/en/sql-reference/sql/copy-into-table"
CFF = "https://docs.snowflake.com/en/sql-reference/sql/create-file-format"

CASES = [
    Case(
        id="csv_escape_unenclosed_default",
        source=(
            f"{CIT} (ESCAPE_UNENCLOSED_FIELD, default backslash: 'interpret instances of the "
            "FIELD_DELIMITER or RECORD_DELIMITER characters in the data as literals ... can also be "
            "used to escape instances of itself'; NULL_IF default \\N assumes it)"
        ),
        columns="id INT, name VARCHAR, note VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV)",
        files={"a.csv": b"1,Smith\\, John,C:\\temp\n2,back\\\\slash,\\N\n3,not \\N,\\\\N\n"},
        rows=[(1, "Smith, John", "C:\\temp"), (2, "back\\slash", None), (3, "not \\N", "\\N")],
        history={"a.csv": {"STATUS": "Loaded", "ROW_COUNT": 3, "ERROR_COUNT": 0}},
    ),
    Case(
        id="csv_escape_unenclosed_trailing_backslash",
        source=(
            f"{CIT} (ESCAPE_UNENCLOSED_FIELD: 'If a row in a data file ends in the backslash (\\) "
            "character, this character escapes the newline ... the load operation treats this row "
            "and the next row as a single row of data')"
        ),
        columns="id INT, note VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV)",
        files={"b.csv": b"1,first half \\\nsecond half\n2,alone\n"},
        rows=[(1, "first half \nsecond half"), (2, "alone")],
        history={"b.csv": {"STATUS": "Loaded", "ROW_COUNT": 2, "ROW_PARSED": 2}},
    ),
    Case(
        id="csv_escape_unenclosed_none",
        source=f"{CIT} (ESCAPE_UNENCLOSED_FIELD: 'To avoid this issue, set the value to NONE')",
        columns="id INT, note VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV ESCAPE_UNENCLOSED_FIELD = NONE) ON_ERROR = CONTINUE",
        files={"c.csv": b"1,ends in \\\n2,a\\,b\n"},
        rows=[(1, "ends in \\")],
        history={
            "c.csv": {
                "STATUS": "Partially loaded",
                "ERROR_COUNT": 1,
                "FIRST_ERROR_MESSAGE": "Field delimiter ',' found while expecting record delimiter '\\n'",
                "FIRST_ERROR_LINE_NUMBER": 2,
            }
        },
    ),
    Case(
        id="csv_escape_enclosed",
        source=(
            f"{CIT} (ESCAPE: 'use the ESCAPE character to interpret instances of the "
            "FIELD_OPTIONALLY_ENCLOSED_BY character in the data as literals'; enclosed fields only)"
        ),
        columns="id INT, quote VARCHAR",
        copy=(
            "FROM @{stage} FILE_FORMAT = (TYPE = CSV FIELD_OPTIONALLY_ENCLOSED_BY = '\"' "
            "ESCAPE = '\\\\' ESCAPE_UNENCLOSED_FIELD = NONE)"
        ),
        files={"d.csv": b'1,"say \\"hi\\", twice"\n2,"a\\\\b"\n'},
        rows=[(1, 'say "hi", twice'), (2, "a\\b")],
        history={"d.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="csv_record_delimiter_octal",
        source=(
            f"{CIT} (RECORD_DELIMITER: 'for records delimited by the circumflex accent (^) "
            "character, specify the octal (\\\\136) or hex (0x5e) value')"
        ),
        columns="id INT, name VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV RECORD_DELIMITER = '\\\\136')",
        files={"e.csv": b"1,a^2,b\nc^3,d"},
        rows=[(1, "a"), (2, "b\nc"), (3, "d")],
        history={"e.csv": {"STATUS": "Loaded", "ROW_COUNT": 3}},
    ),
    Case(
        id="csv_record_delimiter_hex",
        source=f"{CIT} (RECORD_DELIMITER: '... or hex (0x5e) value')",
        columns="id INT, name VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV RECORD_DELIMITER = 0x5e FIELD_DELIMITER = '|')",
        files={"f.csv": b"1|a^2|b^"},
        rows=[(1, "a"), (2, "b")],
        history={"f.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="csv_field_delimiter_multibyte_hex",
        source=(
            f"{CIT} (FIELD_DELIMITER, multibyte characters: 'for records delimited by the cent (¢) "
            "character, specify the hex (\\xC2\\xA2) value')"
        ),
        columns="id INT, price VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV FIELD_DELIMITER = '\\xC2\\xA2')",
        files={"g.csv": "1¢9,99 €\n2¢0,50 €\n".encode()},
        rows=[(1, "9,99 €"), (2, "0,50 €")],
        history={"g.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="csv_multi_character_delimiters",
        source=(
            f"{CIT} (RECORD_DELIMITER / FIELD_DELIMITER: 'One or more singlebyte or multibyte "
            "characters'; neither a substring of the other)"
        ),
        columns="id INT, name VARCHAR, note VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV FIELD_DELIMITER = '||' RECORD_DELIMITER = '~~')",
        files={"h.csv": b"1||a|b||x~~2||c||~~"},
        rows=[(1, "a|b", "x"), (2, "c", None)],
        history={"h.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="csv_field_delimiter_none",
        source=f"{CFF} (FIELD_DELIMITER = NONE: each record is one field)",
        columns="line VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV FIELD_DELIMITER = NONE ESCAPE_UNENCLOSED_FIELD = NONE)",
        files={"i.csv": b"a,b,c\nd;e\n"},
        rows=[("a,b,c",), ("d;e",)],
        history={"i.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="csv_multi_line_false",
        source=(
            f"{CIT} (MULTI_LINE = FALSE: 'If MULTI_LINE is set to FALSE and the specified record "
            "delimiter is present within a CSV field, the record containing the field will be "
            "interpreted as an error')"
        ),
        columns="id INT, note VARCHAR",
        copy=(
            "FROM @{stage} FILE_FORMAT = (TYPE = CSV FIELD_OPTIONALLY_ENCLOSED_BY = '\"' "
            "MULTI_LINE = FALSE) ON_ERROR = CONTINUE"
        ),
        files={"j.csv": b'1,"one line"\n2,"two\nlines"\n3,"again one"\n'},
        rows=[(1, "one line"), (3, "again one")],
        history={
            "j.csv": {
                "STATUS": "Partially loaded",
                "ROW_COUNT": 2,
                "ROW_PARSED": 3,
                "ERROR_COUNT": 1,
                "FIRST_ERROR_MESSAGE": "Record delimiter '\\n' found inside a field, and MULTI_LINE is FALSE",
                "FIRST_ERROR_LINE_NUMBER": 2,
                "FIRST_ERROR_COLUMN_NAME": '"{TABLE}"["NOTE":2]',
            }
        },
    ),
    Case(
        id="csv_encoding_utf16",
        source=f"{CIT} (ENCODING = 'UTF16': 'The data is converted into UTF-8 before it is loaded')",
        columns="id INT, name VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV ENCODING = 'UTF16' SKIP_HEADER = 1)",
        files={"k.csv": "id,name\n1,Ольга\n2,日本\n".encode("utf-16")},
        rows=[(1, "Ольга"), (2, "日本")],
        history={"k.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="csv_encoding_latin1",
        source=f"{CIT} (ENCODING = 'ISO88591': Danish, Dutch, English, French, German, ...)",
        columns="id INT, name VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV ENCODING = 'ISO88591')",
        files={"l.csv": "1,Zoë\n2,Ærø\n".encode("latin-1")},
        rows=[(1, "Zoë"), (2, "Ærø")],
        history={"l.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="csv_encoding_windows1252",
        source=f"{CIT} (ENCODING = 'WINDOWS1252')",
        columns="id INT, price VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV ENCODING = 'WINDOWS1252' FIELD_DELIMITER = ';')",
        files={"m.csv": "1;9,99 €\n2;„quoted“\n".encode("cp1252")},
        rows=[(1, "9,99 €"), (2, "„quoted“")],
        history={"m.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="csv_invalid_utf8_is_an_error_of_its_row",
        source=(
            f"{CIT} (REPLACE_INVALID_CHARACTERS = FALSE: 'the load operation produces an error when "
            "invalid UTF-8 character encoding is detected'; ON_ERROR = CONTINUE keeps the other rows; "
            "3P transcripts: Invalid UTF8 detected in string '...')"
        ),
        columns="id INT, name VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV SKIP_HEADER = 1) ON_ERROR = CONTINUE",
        files={"n.csv": "id,name\n1,Ann\n2,Zoë\n3,Bo\n".encode("latin-1")},
        rows=[(1, "Ann"), (3, "Bo")],
        history={
            "n.csv": {
                "STATUS": "Partially loaded",
                "ROW_COUNT": 2,
                "ROW_PARSED": 3,
                "ERROR_COUNT": 1,
                "FIRST_ERROR_MESSAGE": "Invalid UTF8 detected in string 'Zo0xEB'",
                "FIRST_ERROR_LINE_NUMBER": 3,
                "FIRST_ERROR_CHARACTER_POS": 3,
                "FIRST_ERROR_COLUMN_NAME": '"{TABLE}"["NAME":2]',
            }
        },
    ),
    Case(
        id="csv_replace_invalid_characters",
        source=(
            f"{CIT} (REPLACE_INVALID_CHARACTERS = TRUE: 'Snowflake replaces invalid UTF-8 characters "
            "with the Unicode replacement character'; one-to-one)"
        ),
        columns="id INT, name VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV REPLACE_INVALID_CHARACTERS = TRUE)",
        files={"o.csv": b"1,Zo\xeb\n2,ok\n"},
        rows=[(1, "Zo\ufffd"), (2, "ok")],
        history={"o.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="csv_skip_byte_order_mark",
        source=f"{CIT} (SKIP_BYTE_ORDER_MARK, default TRUE: 'skip the BOM ... if present')",
        columns="id INT, name VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV)",
        files={"p.csv": b"\xef\xbb\xbf1,a\n2,b\n"},
        rows=[(1, "a"), (2, "b")],
        history={"p.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="csv_skip_byte_order_mark_false",
        source=(
            f"{CIT} (SKIP_BYTE_ORDER_MARK = FALSE: 'could result in the BOM either causing an error "
            "or being merged into the first column in the table')"
        ),
        columns="code VARCHAR, name VARCHAR",
        copy="FROM @{stage} FILE_FORMAT = (TYPE = CSV SKIP_BYTE_ORDER_MARK = FALSE)",
        files={"q.csv": b"\xef\xbb\xbfA1,a\nB2,b\n"},
        rows=[("B2", "b"), ("\ufeffA1", "a")],
        history={"q.csv": {"STATUS": "Loaded", "ROW_COUNT": 2}},
    ),
    Case(
        id="csv_trim_space_keeps_spaces_inside_quotes",
        source=(
            f"{CFF} (TRIM_SPACE example, FIELD_DELIMITER = '|' FIELD_OPTIONALLY_ENCLOSED_BY = '\"': "
            '|"Hello world"| loads as >Hello world<, |" Hello world "| as > Hello world <, '
            '| "Hello world" | as >Hello world<)'
        ),
        columns="id INT, greeting VARCHAR, rest VARCHAR",
        copy=(
            "FROM @{stage} FILE_FORMAT = (TYPE = CSV FIELD_DELIMITER = '|' "
            "FIELD_OPTIONALLY_ENCLOSED_BY = '\"' TRIM_SPACE = TRUE)"
        ),
        files={"r.csv": b'1|"Hello world"|\n2|" Hello world "|\n3| "Hello world" |\n'},
        rows=[(1, "Hello world", None), (2, " Hello world ", None), (3, "Hello world", None)],
        history={"r.csv": {"STATUS": "Loaded", "ROW_COUNT": 3}},
    ),
]
