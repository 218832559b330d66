"""`with_acls` keeps derived indexes up to date incrementally; they must equal a fresh build."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from authz.decide import AuthorizerData
from authz.model import Acl, Operation, PatternType, Permission, Principal, RequestContext, ResourceType
from authz.roles import RoleBinding

T = ResourceType.TOPIC
acls = st.builds(
    Acl,
    st.sampled_from([T, ResourceType.GROUP]),
    st.sampled_from(["a", "ab", "abc", "b", "*"]),
    st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.sampled_from(["User:a", "User:b", "User:*"]),
    st.sampled_from(["*", "1.1.1.1"]),
    st.sampled_from([Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.ALL]),
    st.sampled_from([Permission.ALLOW, Permission.DENY]),
)


def snapshot_state(d: AuthorizerData) -> object:
    index = {rt: {k: (v.allow_literal, v.allow_prefixed, v.deny_literal, v.deny_prefixed)
                  for k, v in d._type_index(rt).items() if any((v.allow_literal, v.allow_prefixed,
                                                                 v.deny_literal, v.deny_prefixed))}
             for rt in (T, ResourceType.GROUP)}
    return index, d._prefix_lengths


@settings(max_examples=300, deadline=None)
@given(st.sets(acls, max_size=12), st.lists(st.tuples(st.sets(acls, max_size=4), st.sets(acls, max_size=4)),
                                           max_size=4))
def test_incremental_indexes_equal_a_fresh_build(initial: set[Acl], steps: list[tuple[set[Acl], set[Acl]]]) -> None:
    bindings = [RoleBinding("User:a", "DeveloperRead", T, "ab", PatternType.PREFIXED)]
    data = AuthorizerData.build(initial, role_bindings=bindings)
    data.warm()  # build the by-type indexes so with_acls has to carry them
    current = set(initial)
    ctx = RequestContext(Principal("User", "a"), "1.1.1.1")
    for plus, minus in steps:
        data = data.with_acls(plus, minus)
        current = (current - minus) | plus
        fresh = AuthorizerData.build(current, role_bindings=bindings)
        assert snapshot_state(data) == snapshot_state(fresh)
        for op in (Operation.READ, Operation.WRITE, Operation.DESCRIBE):
            assert data.authorize_by_resource_type(ctx, op, T) == fresh.authorize_by_resource_type(ctx, op, T)
