import sys, logging, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
import pandas as pd
pd.set_option("display.width", 250); pd.set_option("display.max_columns", 30)
from hta.trace_analysis import TraceAnalysis
for d in sys.argv[1:]:
    print("=====", d)
    for last in (False, True):
        t = TraceAnalysis(trace_dir=d, include_last_profiler_step=last) if last else TraceAnalysis(trace_dir=d)
        print("include_last_profiler_step =", last)
        print(t.get_temporal_breakdown(visualize=False).to_string())
