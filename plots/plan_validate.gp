# The plan against the measurements: memopt plan --validate RESULTS.csv writes plan_validate.csv and
# runs this script (when gnuplot is installed). By hand:
#   gnuplot -e "datafile='plots/plan_validate.csv'; outfile='plots/plan_validate.png'" plots/plan_validate.gp
# Left: predicted peak against measured (every point on the diagonal: the dry backend is exact).
# Right: predicted step time against measured, with the ±15% goal band. Linear axes over the data's
# own range (with a margin): the points are what the eye should compare with the diagonal.
# Columns of plan_validate.csv: 13 measured_peak_bytes, 14 predicted_peak_bytes,
# 16 measured_step_ms, 17 predicted_step_ms.
if (!exists("datafile")) datafile = 'plots/plan_validate.csv'
if (!exists("outfile")) outfile = 'plots/plan_validate.png'
set terminal pngcairo size 1400,700 font ",11"
set output outfile
set datafile separator comma
set datafile missing ''
set key top left
set grid
if (!exists("subtitle")) subtitle = ""
set multiplot layout 1,2 title "memopt plan: predicted against measured".(subtitle ne "" ? "\n".subtitle : "")

GiB = 1024.0**3
set title "peak allocated memory (dry backend replay; goal: exact)"
set xlabel "measured (GiB)"
set ylabel "predicted (GiB)"
stats datafile every ::1 using ($13/GiB) nooutput
pmin = STATS_min; pmax = STATS_max; pm = (pmax - pmin) * 0.08 + 0.1
set xrange [pmin - pm < 0 ? 0 : pmin - pm : pmax + pm]
set yrange [pmin - pm < 0 ? 0 : pmin - pm : pmax + pm]
set size ratio -1
plot datafile every ::1 using ($13/GiB):($14/GiB) with points pt 7 ps 1.2 lc rgb "#1f77b4" title "rows", \
     x with lines lc rgb "#444444" dt 2 title "exact"

set title "step time (roofline, calibrated leave-one-out; goal: within 15%)"
set xlabel "measured (ms)"
set ylabel "predicted (ms)"
set autoscale xy
stats datafile every ::1 using 16 nooutput
tmin = STATS_min; tmax = STATS_max; tm = (tmax - tmin) * 0.08 + 1
set xrange [tmin - tm < 0 ? 0 : tmin - tm : tmax + tm]
set yrange [tmin - tm < 0 ? 0 : tmin - tm : tmax + tm]
set size ratio -1
plot '+' using 1:(0.85*$1):(1.15*$1) with filledcurves fc rgb "#e8f5e9" fs solid 1.0 title "goal: within ±15%", \
     datafile every ::1 using 16:17 with points pt 7 ps 1.2 lc rgb "#d62728" title "rows", \
     x with lines lc rgb "#444444" dt 2 title "exact"
unset multiplot
