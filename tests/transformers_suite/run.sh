#!/usr/bin/env bash
# Run transformers' common model tests (ModelTesterMixin, ConfigTester) on our model with the installed
# transformers release. Those tests ship in the transformers source distribution on PyPI, but
# `tests/generation/test_utils.py`, `tests/exporters/test_export.py` and `tests/utils/` do not; the mixins imported
# from them are replaced by empty classes here, so GenerationTesterMixin and the export tests are not run by this
# script (our own tests cover generation). Usage: bash tests/transformers_suite/run.sh PYTHON [PYTEST ARGS]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
shift
version=$("$py" -c "import transformers; print(transformers.__version__)")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -m pip download -q --no-deps --no-binary :all: "transformers==$version" -d "$work" 2>/dev/null
tar xzf "$work/transformers-$version.tar.gz" -C "$work" "transformers-$version/tests"
suite="$work/suite"
mkdir -p "$suite/tests/exporters" "$suite/tests/generation" "$suite/tests/utils"
cp "$work/transformers-$version/tests/test_modeling_common.py" "$work/transformers-$version/tests/test_configuration_common.py" "$suite/tests/"
touch "$suite/tests/__init__.py" "$suite/tests/exporters/__init__.py" "$suite/tests/generation/__init__.py" "$suite/tests/utils/__init__.py"
echo "class ExportTesterMixin: pass" >"$suite/tests/exporters/test_export.py"
echo "class GenerationTesterMixin: pass" >"$suite/tests/generation/test_utils.py"
echo "config_common_kwargs = {}" >"$suite/tests/utils/test_configuration_utils.py"
cp "$root/tests/transformers_suite/vanilla_transformer_tester.py" "$suite/test_vanilla_transformer_common.py"
cd "$suite"
echo "transformers $version common model tests"
# test_generation_tester_mixin_inheritance asserts GenerationTesterMixin, which the source distribution lacks
PYTHONPATH="$suite:$root" HF_HUB_OFFLINE=1 "$py" -m pytest -q -p no:cacheprovider -p no:logging \
    --deselect test_vanilla_transformer_common.py::VanillaTransformerModelTest::test_generation_tester_mixin_inheritance \
    test_vanilla_transformer_common.py "$@"
