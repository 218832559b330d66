"""Avro parsing rules, Confluent's canonical string and Confluent's normalisation."""

from __future__ import annotations

import pytest

from registry.schemas import InvalidSchemaError, SchemaReference, SchemaType, parse_schema


def canonical(text: str, **kwargs: object) -> str:
    return parse_schema(SchemaType.AVRO, text, **kwargs).canonical  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "expected"), [
    ('{"type": "string"}', '"string"'),
    ('"int"', '"int"'),
    ('{"type":"int","logicalType":"date"}', '{"type":"int","logicalType":"date"}'),
    ('["null", {"type": "string"}]', '["null","string"]'),
    # key order is Avro's, not the input's; docs, defaults, order and aliases kept
    ('{"fields":[{"default":1,"type":"int","name":"a","doc":"d","order":"descending","aliases":["x"]}],'
     '"name":"R","type":"record","namespace":"ns","doc":"rd","aliases":["Old"]}',
     '{"type":"record","name":"R","namespace":"ns","doc":"rd","fields":[{"name":"a","type":"int","doc":"d",'
     '"default":1,"order":"descending","aliases":["x"]}],"aliases":["Old"]}'),
    # ascending order is not written; custom properties follow in source order
    ('{"type":"record","name":"R","zz":1,"fields":[{"name":"a","type":"int","order":"ascending","p":true}],"aa":2}',
     '{"type":"record","name":"R","fields":[{"name":"a","type":"int","p":true}],"zz":1,"aa":2}'),
    # a namespace is written only where it changes; a named type is spelled out once
    ('{"type":"record","name":"a.R","fields":[{"name":"e","type":{"type":"enum","name":"E","symbols":["X"]}},'
     '{"name":"e2","type":"E"},{"name":"f","type":{"type":"fixed","name":"b.F","size":2}},{"name":"g","type":"b.F"}]}',
     '{"type":"record","name":"R","namespace":"a","fields":[{"name":"e","type":{"type":"enum","name":"E",'
     '"symbols":["X"]}},{"name":"e2","type":"E"},{"name":"f","type":{"type":"fixed","name":"F","namespace":"b",'
     '"size":2}},{"name":"g","type":"b.F"}]}'),
    # recursion
    ('{"type":"record","name":"List","fields":[{"name":"next","type":["null","List"]}]}',
     '{"type":"record","name":"List","fields":[{"name":"next","type":["null","List"]}]}'),
    # double defaults as Java writes them
    ('{"type":"record","name":"R","fields":[{"name":"d","type":"double","default":1e20}]}',
     '{"type":"record","name":"R","fields":[{"name":"d","type":"double","default":1.0E20}]}'),
    ('{"type":"enum","name":"E","symbols":["A","B"],"default":"B"}',
     '{"type":"enum","name":"E","symbols":["A","B"],"default":"B"}'),
])
def test_canonical_string_is_avro_java_to_string(text: str, expected: str) -> None:
    assert canonical(text) == expected
    assert canonical(expected) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("", "Invalid schema JSON"),
    ("{", "Invalid schema JSON"),
    ('"Foo"', 'Undefined name: "Foo"'),
    ('{"type":"record","name":"R","fields":[{"name":"a","type":"Missing"}]}', '"Missing" is not a defined name'),
    ('{"name":"R","fields":[]}', "No type"),
    ('{"type":"record","fields":[]}', "No name in schema"),
    ('{"type":"record","name":"R"}', "Record has no fields"),
    ('{"type":"record","name":"1R","fields":[]}', "Illegal initial character: 1R"),
    ('{"type":"record","name":"R-x","fields":[]}', "Illegal character in: R-x"),
    ('{"type":"enum","name":"E","symbols":["A","A"]}', "Duplicate enum symbol: A"),
    ('{"type":"enum","name":"E","symbols":["A"],"default":"B"}', "The Enum Default: B is not in the enum symbol set"),
    ('{"type":"fixed","name":"F"}', "Invalid or no size"),
    ('["int","int"]', "Duplicate in union:int"),
    ('["int",["long"]]', "Nested union"),
    ('{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"a","type":"int"}]}',
     "Duplicate field a in record R"),
    ('{"type":"record","name":"R","fields":[{"name":"r","type":{"type":"record","name":"R","fields":[]}}]}',
     "Can't redefine: R"),
    # Confluent's RestApiTest.testRegisterBadDefault
    ('{"type":"record","name":"R","fields":[{"name":"f","type":"string","default":null}]}',
     "Invalid default for field f"),
    ('{"type":"record","name":"R","fields":[{"name":"f","type":["null","string"],"default":1}]}',
     "Invalid default for field f"),
    ('{"type":"record","name":"R","fields":[{"name":"f","type":"int","default":2147483648}]}',
     "Invalid default for field f"),
    ('{"type":"map"}', "Map has no values type"),
    ('{"type":"array"}', "Array has no items type"),
    ('{"type":"whatever"}', "Type not supported: whatever"),
    ("12", "Schema not yet supported"),
])
def test_invalid_avro_is_rejected_with_the_parsers_message(text: str, message: str) -> None:
    with pytest.raises(InvalidSchemaError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse_schema(SchemaType.AVRO, text)


def test_valid_defaults_are_accepted() -> None:
    text = ('{"type":"record","name":"R","fields":[{"name":"u","type":["null","string"],"default":null},'
            '{"name":"m","type":{"type":"map","values":"long"},"default":{"a":1}},'
            '{"name":"f","type":"float","default":"NaN"},{"name":"n","type":"double","default":1},'
            # Avro 1.12 (Confluent 8): a union default may match any branch
            '{"name":"s","type":["null","string"],"default":"x"}]}')
    assert parse_schema(SchemaType.AVRO, text).canonical.startswith('{"type":"record"')


def test_referenced_types_are_named_not_repeated() -> None:
    address = parse_schema(SchemaType.AVRO, '{"type":"record","name":"Address","namespace":"shop",'
                                            '"fields":[{"name":"city","type":"string"}]}')
    text = '{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"to","type":"Address"}]}'
    order = parse_schema(SchemaType.AVRO, text, references=[SchemaReference("shop.Address", "address", 1)],
                         resolved={"shop.Address": address})
    assert order.canonical == text
    # the serdes get a self-contained fastavro schema
    import io

    import fastavro

    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, order.parsed, {"to": {"city": "Oslo"}})
    buffer.seek(0)
    assert fastavro.schemaless_reader(buffer, order.parsed, None) == {"to": {"city": "Oslo"}}


def test_missing_referenced_type_is_invalid() -> None:
    with pytest.raises(InvalidSchemaError, match="not a defined name"):
        parse_schema(SchemaType.AVRO, '{"type":"record","name":"O","fields":[{"name":"a","type":"shop.Address"}]}')


# --- normalisation (Confluent's AvroSchemaUtils.toNormalizedString, then stored canonically) ---

def test_normalize_sorts_properties_and_aliases_and_makes_equivalent_texts_equal() -> None:
    one = ('{"type":"record","name":"R","namespace":"ns","zz":1,"aa":{"y":1,"x":2},"aliases":["B","A"],'
           '"fields":[{"name":"f","type":{"type":"string","b":1,"a":2},"aliases":["y","x"],"p2":1,"p1":2}]}')
    two = ('{"aa":{"x":2,"y":1},"zz":1,"aliases":["A","B"],"name":"ns.R","type":"record",'
           '"fields":[{"p1":2,"p2":1,"aliases":["x","y"],"type":{"a":2,"b":1,"type":"string"},"name":"f"}]}')
    assert canonical(one) != canonical(two)
    n1, n2 = canonical(one, normalize=True), canonical(two, normalize=True)
    assert n1 == n2
    assert n1 == ('{"type":"record","name":"R","namespace":"ns","fields":[{"name":"f","type":{"type":"string",'
                  '"a":2,"b":1},"aliases":["x","y"],"p1":2,"p2":1}],"aa":{"x":2,"y":1},"zz":1,'
                  '"aliases":["A","B"]}')


def test_normalize_writes_logical_type_first_and_drops_zero_scale() -> None:
    text = '{"type":"bytes","scale":0,"zeta":1,"alpha":2,"precision":4,"logicalType":"decimal"}'
    assert canonical(text) == '{"type":"bytes","scale":0,"zeta":1,"alpha":2,"precision":4,"logicalType":"decimal"}'
    assert canonical(text, normalize=True) == (
        '{"type":"bytes","logicalType":"decimal","precision":4,"alpha":2,"scale":0,"zeta":1}'
    )


def test_normalize_sorts_and_dedups_references() -> None:
    ref = parse_schema(SchemaType.AVRO, '{"type":"fixed","name":"F","size":1}')
    refs = [SchemaReference("F", "b", 2), SchemaReference("F", "a", 1), SchemaReference("F", "a", 1)]
    parsed = parse_schema(SchemaType.AVRO, '"F"', references=refs, resolved={"F": ref}, normalize=True)
    assert parsed.references == (SchemaReference("F", "a", 1), SchemaReference("F", "b", 2))
    assert parsed.canonical == '"F"'


def test_invalid_logical_type_is_kept_in_the_text_but_ignored_for_serialization() -> None:
    # Avro Java ignores a decimal whose scale exceeds its precision and uses plain bytes
    parsed = parse_schema(SchemaType.AVRO, '{"type":"bytes","logicalType":"decimal","precision":2,"scale":5}')
    assert parsed.canonical == '{"type":"bytes","logicalType":"decimal","precision":2,"scale":5}'
    assert "logicalType" not in parsed.parsed  # type: ignore[operator]
    valid = parse_schema(SchemaType.AVRO, '{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}')
    assert valid.parsed["logicalType"] == "decimal"  # type: ignore[index]


def test_names_follow_javas_letter_and_digit_classes() -> None:
    assert canonical('{"type":"record","name":"Straße_1","fields":[]}') == (
        '{"type":"record","name":"Straße_1","fields":[]}'
    )
    with pytest.raises(InvalidSchemaError, match="Illegal character"):
        parse_schema(SchemaType.AVRO, '{"type":"record","name":"R\u00b2","fields":[]}')  # superscript two


def test_confluent_schema_normalization_scenario() -> None:
    # Confluent's RestApiTest.testSchemaNormalization: the same schema with another spelling,
    # property order and reference order normalises to the same text and references, and the
    # client-resolved form (references inlined) resolves to the same text.
    sub1 = parse_schema(SchemaType.AVRO, '{"type":"record","name":"Subrecord1","namespace":"otherns",'
                                         '"fields":[{"name":"field1","type":"string"}]}')
    sub2 = parse_schema(SchemaType.AVRO, '{"type":"record","name":"Subrecord2","namespace":"otherns",'
                                         '"fields":[{"name":"field2","type":"string"}]}')
    ref1 = SchemaReference("otherns.Subrecord1", "ref1", 1)
    ref2 = SchemaReference("otherns.Subrecord2", "ref2", 1)
    resolved = {"otherns.Subrecord1": sub1, "otherns.Subrecord2": sub2}
    one = ('{"type":"record","name":"myrecord","fields":[{"type":{"type":"int"},"name":"field0"},'
           '{"name":"field1","type":"otherns.Subrecord1"},{"name":"field2","type":"otherns.Subrecord2"}],'
           '"extraMetadata":{"a":1,"b":2}}')
    two = ('{"type":"record","name":"myrecord","fields":[{"type":"int","name":"field0"},'
           '{"name":"field1","type":"otherns.Subrecord1"},{"name":"field2","type":"otherns.Subrecord2"}],'
           '"extraMetadata":{"b":2,"a":1}}')
    first = parse_schema(SchemaType.AVRO, one, references=[ref1, ref2], resolved=resolved, normalize=True)
    second = parse_schema(SchemaType.AVRO, two, references=[ref2, ref1], resolved=resolved, normalize=True)
    assert first.canonical == second.canonical
    assert first.references == second.references == (ref1, ref2)
    assert first.fingerprint() == second.fingerprint()
    inlined = parse_schema(SchemaType.AVRO, second.resolved(), normalize=True)
    assert inlined.references == ()
    assert inlined.resolved() == first.resolved()
    assert '"name":"Subrecord1","namespace":"otherns"' in first.resolved()
