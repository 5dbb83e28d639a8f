"""Formulas to MathML (attndyn.app.mathml): which text is a formula, what is escaped, what is kept.

The oracle for the MathML itself is latex2mathml's own output for the same LaTeX (this module only
finds the formulas and keeps the prose safe); the browser tests check that Chromium draws it.
"""

from __future__ import annotations

from latex2mathml.converter import convert

from attndyn.app import mathml


def test_prose_is_escaped_and_each_formula_converted():
    out = mathml.html_text(r"a <b> & \(x_i^2\) then \[\sum_j P_{ij} = 1\] end")
    assert out.startswith("a &lt;b&gt; &amp; ")
    assert out.endswith(" end")
    assert convert("x_i^2").split(">", 1)[1] in out  # the inline formula, as the converter writes it
    assert convert(r"\sum_j P_{ij} = 1", display="block").split(">", 1)[1] in out
    assert out.count("<math ") == 2
    assert 'alttext="x_i^2"' in out
    assert 'display="block"' in out


def test_text_without_formulas_is_only_escaped():
    assert mathml.html_text("costs $5 and $HOME, 1 < 2") == "costs $5 and $HOME, 1 &lt; 2"


def test_a_formula_the_converter_cannot_read_is_shown_as_its_source():
    out = mathml.html_text(r"see \(\frac{1}{\)")
    assert "<math" not in out
    assert "<code class='tex'>\\frac{1}{</code>" in out


def test_plain_keeps_the_latex_without_delimiters():
    assert mathml.plain(r"with \(V = I_d\) and \[z\]") == "with V = I_d and z"


def test_notebook_dollars_but_not_shell_variables_or_prices():
    html = "<p>the map $x \\leftarrow x + P(x)\\, V x$ and $$z &lt; 1$$ at $HOME for $5 or $6</p>"
    out = mathml.dollars_to_mathml(html)
    assert out.count("<math ") == 2
    assert "at $HOME for $5 or $6</p>" in out
    assert 'alttext="z &lt; 1"' in out  # unescaped before conversion, escaped again in the attribute
    assert convert("z < 1", display="block").split(">", 1)[1] in out


def test_docs_delimiters_in_rendered_html():
    out = mathml.delimited_to_mathml(r"<span>\(a &lt; b\)</span>")
    assert out.startswith("<span><math ")
    assert convert("a < b").split(">", 1)[1] in out
