#!/usr/bin/env bash
# Run transformers' own common model tests (ModelTesterMixin, GenerationTesterMixin, ConfigTester) on our model,
# through vanilla_transformer_tester.py beside this script, with the installed transformers release.
#
# Usage: [TRANSFORMERS_TESTS_DIR=DIR] bash tests/transformers_suite/run.sh PYTHON [PYTEST ARGS]
#
# TRANSFORMERS_TESTS_DIR unset (CI): the tests come from the transformers source distribution on PyPI at the
#   installed version. It ships tests/test_modeling_common.py and tests/test_configuration_common.py but not
#   tests/generation/, tests/exporters/ or tests/utils/, so GenerationTesterMixin, the export mixins and
#   config_common_kwargs are replaced by empty stubs: the generation and export tests do not run, and
#   test_generation_tester_mixin_inheritance (which asserts the real GenerationTesterMixin) is deselected.
# TRANSFORMERS_TESTS_DIR=DIR: DIR is the tests/ folder of a transformers source checkout at the tag of the
#   installed release (`git archive v5.15.0 tests utils/test_module` is enough: tests/utils/ imports the
#   checkout's utils/test_module). It is used whole, nothing is stubbed or deselected: the generation
#   conformance tests (tests/generation/test_utils.py) and the export tests run too.
# A PYTHONPATH set by the caller (e.g. test-only packages those tests import) is kept, after the suite's own.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
shift
version=$("$py" -c "import transformers; print(transformers.__version__)")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
suite="$work/suite"
mkdir -p "$suite"
deselect=()
if [[ -n "${TRANSFORMERS_TESTS_DIR:-}" ]]; then
    tests_dir="$(cd "$TRANSFORMERS_TESTS_DIR" && pwd)"
    for f in test_modeling_common.py test_configuration_common.py generation/test_utils.py; do
        [[ -f "$tests_dir/$f" ]] || { echo "TRANSFORMERS_TESTS_DIR=$tests_dir has no $f" >&2; exit 2; }
    done
    cp -r "$tests_dir" "$suite/tests"  # a copy: the checkout gets no __pycache__ from this run
    # tests/utils/test_configuration_utils.py imports the checkout's utils/test_module (through sys.path)
    if [[ -d "$tests_dir/../utils/test_module" ]]; then
        mkdir -p "$suite/utils"
        cp -r "$tests_dir/../utils/test_module" "$suite/utils/"
    fi
    echo "transformers $version common model and generation tests from $tests_dir"
else
    "$py" -m pip download -q --no-deps --no-binary :all: "transformers==$version" -d "$work" 2>/dev/null
    tar xzf "$work/transformers-$version.tar.gz" -C "$work" "transformers-$version/tests"
    mkdir -p "$suite/tests/exporters" "$suite/tests/generation" "$suite/tests/utils"
    cp "$work/transformers-$version/tests/test_modeling_common.py" \
        "$work/transformers-$version/tests/test_configuration_common.py" "$suite/tests/"
    touch "$suite/tests/__init__.py" "$suite/tests/exporters/__init__.py" "$suite/tests/generation/__init__.py" \
        "$suite/tests/utils/__init__.py"
    echo "class ExportTesterMixin: pass" >"$suite/tests/exporters/test_export.py"
    echo "class GenerationTesterMixin: pass" >"$suite/tests/generation/test_utils.py"
    echo "config_common_kwargs = {}" >"$suite/tests/utils/test_configuration_utils.py"
    deselect=(--deselect test_vanilla_transformer_common.py::VanillaTransformerModelTest::test_generation_tester_mixin_inheritance)
    echo "transformers $version common model tests from the source distribution (generation and export stubbed)"
fi
cp "$root/tests/transformers_suite/vanilla_transformer_tester.py" "$suite/test_vanilla_transformer_common.py"
cd "$suite"
export PYTHONPATH="$suite:$root${PYTHONPATH:+:$PYTHONPATH}"
HF_HUB_OFFLINE=1 "$py" -m pytest -q -p no:cacheprovider -p no:logging "${deselect[@]}" test_vanilla_transformer_common.py "$@"
