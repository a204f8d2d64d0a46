from explorer.passes import run_pipeline
from explorer.passes.textdiff import diff_scripts, side_by_side, split_functions, unified


def test_split_and_diff_per_function(tiny_module):
    run = run_pipeline(tiny_module, "tuning")
    legal = run.find("LegalizeOps").index
    before, after = run.script(-1), run.script(legal)
    assert list(split_functions(before)) == ["main"]
    funcs = split_functions(after)
    assert "conv2d" in funcs and "main" in funcs and funcs["conv2d"].lstrip().startswith("@T.prim_func")
    diffs = {d.name: d for d in diff_scripts(before, after)}
    assert diffs["main"].status == "changed" and diffs["conv2d"].status == "added"
    assert diffs["main"].added > 0 and diffs["main"].removed > 0
    assert "call_tir" in diffs["main"].unified


def test_unchanged_scripts_have_no_changes(tiny_module):
    run = run_pipeline(tiny_module, "tuning")
    s = run.script(-1)
    assert all(d.status == "same" for d in diff_scripts(s, s))


def test_side_by_side_rows():
    a = "\n".join(f"line {i}" for i in range(20))
    b = a.replace("line 10", "LINE TEN") + "\nline 20"
    rows = side_by_side(a, b, context=2)
    tags = [r.tag for r in rows]
    assert "replace" in tags and "insert" in tags and tags[0] == "skip"
    rep = next(r for r in rows if r.tag == "replace")
    assert (rep.left, rep.right, rep.left_no, rep.right_no) == ("line 10", "LINE TEN", 11, 11)
    assert unified(a, b).count("\n+") >= 2


def test_inline_changes_mark_only_what_differs():
    from explorer.passes.textdiff import inline_changes

    left, right = inline_changes("x = T.int64(64) + y", "x = T.int64(56) + y")
    assert "".join(t for t, _ in left) == "x = T.int64(64) + y"
    assert [t for t, changed in left if changed] == ["4"] and [t for t, changed in right if changed] == ["5"]
    unrelated = inline_changes("lv1 = R.call_tir(cls.batch_norm, (lv,))", "gv = R.output(x)")
    assert not any(changed for runs in unrelated for _, changed in runs)


def test_side_by_side_html_wraps_long_lines_in_a_fixed_layout():
    from app.components import side_by_side_html

    long_line = "    lv = R.call_tir(cls.fused_conv2d_add_relu, (" + ", ".join(f"arg{i}" for i in range(200)) + "))"
    html = side_by_side_html(long_line + "\nsame", long_line.replace("arg7,", "arg77,") + "\nsame")
    assert "table-layout: fixed" in html and "width: 100%" in html and "pre-wrap" in html
    assert "white-space: pre;" not in html and "min-width" not in html
    assert '<mark class="ins">7</mark>' in html
