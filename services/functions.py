"""The functions a query may call: an allow-list of scalar, aggregate and window functions.

Deny by default. The check runs on the Snowflake syntax tree before transpiling, so a function is
allowed by what sqlglot understood the user to call (its expression class), not by the name
DuckDB will see. Nothing here reads files, settings, the environment, extensions or DuckDB's
catalog; table functions are refused elsewhere (services/query.py), whatever their name.
"""

from __future__ import annotations

from sqlglot import exp

from floe.errors import CompilationError

# Functions sqlglot models as classes. Connectives (AND, OR) are functions to sqlglot too.
ALLOWED: frozenset[type[exp.Func]] = frozenset(
    {
        # logic and conditionals
        exp.And,
        exp.Or,
        exp.Xor,
        exp.Case,
        exp.If,
        exp.Coalesce,
        exp.Nullif,
        exp.Nvl2,
        exp.DecodeCase,
        exp.EqualNull,
        exp.Booland,
        exp.Boolor,
        exp.Boolnot,
        exp.Greatest,
        exp.Least,
        exp.Exists,
        # conversion
        exp.Cast,
        exp.TryCast,
        exp.ToChar,
        exp.ToNumber,
        exp.ToDouble,
        exp.ToBoolean,
        exp.Typeof,
        exp.ParseJSON,
        exp.JSONExtract,
        exp.JSONExtractScalar,
        exp.GetExtract,
        exp.Array,
        exp.ArraySize,
        exp.ArrayContains,
        exp.ArrayToString,
        exp.Struct,
        # aggregates
        exp.Count,
        exp.CountIf,
        exp.Sum,
        exp.Avg,
        exp.Min,
        exp.Max,
        exp.AnyValue,
        exp.ApproxDistinct,
        exp.ArrayAgg,
        exp.GroupConcat,
        exp.Median,
        exp.Mode,
        exp.Stddev,
        exp.StddevPop,
        exp.StddevSamp,
        exp.Variance,
        exp.VariancePop,
        exp.Corr,
        exp.CovarPop,
        exp.CovarSamp,
        exp.PercentileCont,
        exp.PercentileDisc,
        exp.ApproxQuantile,
        exp.LogicalAnd,
        exp.LogicalOr,
        exp.BitwiseAndAgg,
        exp.BitwiseOrAgg,
        exp.BitwiseXorAgg,
        exp.ArgMax,
        exp.ArgMin,
        exp.Kurtosis,
        exp.Skewness,
        # window functions
        exp.RowNumber,
        exp.Rank,
        exp.DenseRank,
        exp.PercentRank,
        exp.CumeDist,
        exp.Ntile,
        exp.Lag,
        exp.Lead,
        exp.FirstValue,
        exp.LastValue,
        exp.NthValue,
        # strings
        exp.Concat,
        exp.ConcatWs,
        exp.Upper,
        exp.Lower,
        exp.Length,
        exp.ByteLength,
        exp.BitLength,
        exp.Trim,
        exp.Substring,
        exp.Left,
        exp.Right,
        exp.Replace,
        exp.Reverse,
        exp.Repeat,
        exp.Pad,
        exp.Initcap,
        exp.Split,
        exp.SplitPart,
        exp.StrPosition,
        exp.StartsWith,
        exp.EndsWith,
        exp.Contains,
        exp.RegexpLike,
        exp.RegexpILike,
        exp.RegexpReplace,
        exp.RegexpExtract,
        exp.RegexpCount,
        exp.RegexpInstr,
        exp.Ascii,
        exp.Chr,
        exp.Unicode,
        exp.Translate,
        exp.Space,
        exp.Stuff,
        exp.Strtok,
        exp.Collate,
        exp.MD5,
        exp.SHA,
        exp.SHA2,
        exp.Hex,
        exp.Base64Encode,
        exp.Levenshtein,
        exp.JarowinklerSimilarity,
        exp.Uuid,
        # math
        exp.Abs,
        exp.Ceil,
        exp.Floor,
        exp.Round,
        exp.Trunc,
        exp.Sign,
        exp.Sqrt,
        exp.Cbrt,
        exp.Pow,
        exp.Exp,
        exp.Ln,
        exp.Log,
        exp.Sin,
        exp.Cos,
        exp.Tan,
        exp.Asin,
        exp.Acos,
        exp.Atan,
        exp.Atan2,
        exp.Sinh,
        exp.Cosh,
        exp.Tanh,
        exp.Cot,
        exp.Degrees,
        exp.Radians,
        exp.Pi,
        exp.Factorial,
        exp.Rand,
        exp.Uniform,
        exp.WidthBucket,
        # dates and times
        exp.CurrentDate,
        exp.CurrentTimestamp,
        exp.CurrentTimestampLTZ,
        exp.CurrentTime,
        exp.Localtime,
        exp.Localtimestamp,
        exp.Systimestamp,
        exp.DateAdd,
        exp.DateSub,
        exp.DateDiff,
        exp.DateTrunc,
        exp.TimestampAdd,
        exp.TimestampSub,
        exp.TimestampDiff,
        exp.TimestampTrunc,
        exp.TimeAdd,
        exp.TimeSub,
        exp.TimeDiff,
        exp.TimeTrunc,
        exp.TimeSlice,
        exp.TsOrDsAdd,
        exp.TsOrDsDiff,
        exp.TsOrDsToDate,
        exp.TsOrDsToTime,
        exp.TsOrDsToTimestamp,
        exp.Date,
        exp.Time,
        exp.Year,
        exp.Quarter,
        exp.Month,
        exp.Week,
        exp.WeekOfYear,
        exp.Day,
        exp.DayOfMonth,
        exp.DayOfWeek,
        exp.DayOfWeekIso,
        exp.DayOfYear,
        exp.Hour,
        exp.Minute,
        exp.Second,
        exp.Dayname,
        exp.Monthname,
        exp.LastDay,
        exp.AddMonths,
        exp.MonthsBetween,
        exp.NextDay,
        exp.PreviousDay,
        exp.DateFromParts,
        exp.TimestampFromParts,
        exp.TimeFromParts,
        exp.Extract,
        exp.ConvertTimezone,
        exp.StrToDate,
        exp.StrToTime,
        exp.TimeToStr,
        exp.UnixToTime,
        exp.TimeToUnix,
    }
)

# Functions sqlglot passes through by name (exp.Anonymous): each is harmless under the same name in
# DuckDB. SYSTEM$PIPE_STATUS never reaches DuckDB: the engine replaces it by its answer.
ALLOWED_NAMES: frozenset[str] = frozenset({"SYSTEM$PIPE_STATUS", "TO_TIMESTAMP", "HASH"})


def function_name(node: exp.Func) -> str:
    """The name a user called ``node`` by, upper-cased (sqlglot's canonical name for typed ones)."""
    if isinstance(node, exp.Anonymous | exp.AnonymousAggFunc):
        return str(node.name).upper()
    return node.sql_name().upper()


def is_allowed(node: exp.Func) -> bool:
    """True when ``node`` is a function a query may call."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).upper() in ALLOWED_NAMES
    return type(node) in ALLOWED


def unknown_function(name: str) -> CompilationError:
    """Snowflake's answer to a call of a function it does not know."""
    return CompilationError(f"Unknown function {name}", code="002140", sql_state="42601")


def check_functions(tree: exp.Expr, also: frozenset[str] = frozenset()) -> None:
    """Refuse the first function in ``tree`` that is not on the allow-list, nor one of ``also``
    (the names the engine gave the query's external-function calls)."""
    for node in tree.find_all(exp.Func):
        if isinstance(node, exp.Anonymous) and str(node.name) in also:
            continue
        if not is_allowed(node):
            raise unknown_function(function_name(node))
