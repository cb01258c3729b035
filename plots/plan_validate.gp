# The plan against the measurements: memopt plan --validate RESULTS.csv writes plan_validate.csv and
# runs this script (when gnuplot is installed). By hand:
#   gnuplot -e "datafile='plots/plan_validate.csv'; outfile='plots/plan_validate.png'" plots/plan_validate.gp
# Left: predicted peak against measured (every point on the diagonal: the dry backend is exact).
# Right: predicted step time against measured, with the +-15% goal band.
# Columns of plan_validate.csv: 13 measured_peak_bytes, 14 predicted_peak_bytes,
# 16 measured_step_ms, 17 predicted_step_ms.
if (!exists("datafile")) datafile = 'plots/plan_validate.csv'
if (!exists("outfile")) outfile = 'plots/plan_validate.png'
set terminal pngcairo size 1400,640 font ",11"
set output outfile
set datafile separator comma
set datafile missing ''
set key top left
set grid
set multiplot layout 1,2 title "memopt plan: predicted against measured"

GiB = 1024.0**3
set title "peak allocated memory (dry backend replay; goal: exact)"
set xlabel "measured (GiB)"
set ylabel "predicted (GiB)"
set logscale xy
plot datafile every ::1 using ($13/GiB):($14/GiB) with points pt 7 ps 1.2 lc rgb "#1f77b4" title "rows", \
     x with lines lc rgb "#444444" dt 2 title "exact"

set title "step time (roofline, calibrated leave-one-out; goal: within 15%)"
set xlabel "measured (ms)"
set ylabel "predicted (ms)"
plot datafile every ::1 using 16:17 with points pt 7 ps 1.2 lc rgb "#d62728" title "rows", \
     x with lines lc rgb "#444444" dt 2 title "exact", \
     1.15*x with lines lc rgb "#999999" dt 3 title "+15%", \
     0.85*x with lines lc rgb "#999999" dt 3 notitle
unset multiplot
